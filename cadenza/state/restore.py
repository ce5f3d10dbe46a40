"""Reading changelog partitions from the beginning to their true end, to rebuild state.

"The end" is found by reading (:func:`cadenza.infra.kafka.offsets.end_offsets`), not from the high
watermark, because some brokers under-report the watermark and a restore that stops early would
silently lose state. Partitions are read together by one consumer that is assigned (never
subscribed), so restoring does not touch any consumer group.
"""

from __future__ import annotations

import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from cadenza.infra.kafka.clients import ClientErrors, raise_for_message_error
from cadenza.infra.kafka.errors import KafkaClientError
from cadenza.infra.kafka.offsets import end_offsets
from cadenza.settings import KafkaSettings
from cadenza.state.changelog import ChangelogReplay

__all__ = ["restore_changelogs"]

TopicPartitionKey = tuple[str, int]


def restore_changelogs(
    settings: KafkaSettings,
    consumer: Consumer,
    consumer_errors: ClientErrors,
    partitions: list[TopicPartitionKey],
    timeout: float = 60.0,
) -> dict[TopicPartitionKey, ChangelogReplay]:
    """Replay each changelog ``(topic, partition)`` from its first record to its true end.

    ``consumer`` is a consumer outside any group (used with ``assign``); it is left unassigned.
    """
    replays = {tp: ChangelogReplay() for tp in partitions}
    if not partitions:
        return replays
    ends = end_offsets(settings, partitions, timeout=timeout)
    waiting = {tp for tp in partitions if ends[tp] > 0}
    if not waiting:
        return replays
    consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING) for topic, partition in waiting])
    deadline = time.monotonic() + timeout
    try:
        while waiting:
            if time.monotonic() > deadline:
                raise KafkaClientError(
                    f"could not read changelog partitions {sorted(waiting)} to their end within "
                    f"{timeout:.0f}s; state cannot be restored"
                )
            consumer_errors.raise_fatal()
            for message in consumer.consume(1000, 0.2):
                if not raise_for_message_error(message):
                    continue
                topic, partition, offset = message.topic(), message.partition(), message.offset()
                if topic is None or partition is None or offset is None:
                    continue
                tp = (topic, partition)
                if tp not in waiting:
                    continue
                replays[tp].apply(message.key(), message.value())
                if offset + 1 >= ends[tp]:
                    waiting.discard(tp)
    finally:
        consumer.unassign()
    return replays
