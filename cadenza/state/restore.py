"""Reading changelog partitions from the beginning to their true end, to rebuild state.

:class:`ChangelogReader` reads a slice at a time, so a worker can restore between runs of records
instead of stopping every partition for the longest restore; :func:`restore_changelogs` is the same
reader driven to the end in one blocking call. The end is the client's end-of-partition event, which
a fetch raises once it reached the end the broker reports in the fetch itself (the event
:func:`cadenza.infra.kafka.offsets.end_offsets` ends on too), not the high watermark of an offset
listing, which some brokers under-report: a restore that stopped early would silently lose state.
Partitions are read by one consumer that is assigned (never subscribed), so restoring does not touch
any group.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from cadenza.infra.kafka.clients import ClientErrors, raise_for_message_error
from cadenza.infra.kafka.errors import KafkaClientError
from cadenza.state.changelog import ChangelogReplay

__all__ = ["ChangelogReader", "restore_changelogs"]

TopicPartitionKey = tuple[str, int]


class ChangelogReader:
    """Changelog partitions read from their beginning, a slice of time at a time.

    ``consumer`` is outside any group and must raise end-of-partition events
    (``enable.partition.eof``); the reader assigns and unassigns partitions on it incrementally, so
    partitions can start and stop while others are read.

    With ``tail`` a partition that reached its end is not let go: it goes on being read (a warm copy
    of state that another worker still writes, see :mod:`cadenza.scaling.ownership`) until
    :meth:`stop`, and each time it reaches its end again it is returned again.
    """

    __slots__ = ("_consumer", "_errors", "_tail", "messages", "replays")

    def __init__(self, consumer: Consumer, consumer_errors: ClientErrors, *, tail: bool = False) -> None:
        self._consumer = consumer
        self._errors = consumer_errors
        self._tail = tail
        #: The partitions being read, each with what it has replayed so far.
        self.replays: dict[TopicPartitionKey, ChangelogReplay] = {}
        #: Messages consumed so far, over every partition ever read (end-of-partition events too).
        self.messages = 0

    def start(self, partitions: Iterable[TopicPartitionKey]) -> None:
        """Read these partitions from their first record (those already being read go on)."""
        new = [tp for tp in dict.fromkeys(partitions) if tp not in self.replays]
        if not new:
            return
        self._consumer.incremental_assign([TopicPartition(topic, p, OFFSET_BEGINNING) for topic, p in new])
        for tp in new:
            self.replays[tp] = ChangelogReplay()

    def stop(self, partitions: Iterable[TopicPartitionKey]) -> None:
        """Stop reading these partitions; what they replayed is dropped."""
        gone = [tp for tp in dict.fromkeys(partitions) if self.replays.pop(tp, None) is not None]
        if gone:
            self._consumer.incremental_unassign([TopicPartition(topic, p) for topic, p in gone])

    def read(self, seconds: float, batch: int = 500) -> list[tuple[TopicPartitionKey, ChangelogReplay]]:
        """Read for at most about ``seconds``; return the partitions that reached their end (no longer
        read), each with its replay."""
        consumer, replays = self._consumer, self.replays
        done: list[tuple[TopicPartitionKey, ChangelogReplay]] = []
        deadline = time.perf_counter() + seconds
        while replays:
            self._errors.raise_fatal()
            left = deadline - time.perf_counter()
            if left <= 0:
                break
            messages = consumer.consume(batch, left)
            self.messages += len(messages)
            for message in messages:
                topic, partition = message.topic() or "", message.partition() or 0
                replay = replays.get((topic, partition))
                if replay is None:
                    continue  # stopped meanwhile, or fetched before an unassign took effect
                error = message.error()
                if error is None:
                    replay.apply(message.key(), message.value())
                elif error.code() == KafkaError._PARTITION_EOF:
                    if self._tail:
                        done.append(((topic, partition), replay))
                        continue
                    done.append(((topic, partition), replays.pop((topic, partition))))
                    consumer.incremental_unassign([TopicPartition(topic, partition)])
                else:
                    raise_for_message_error(message)
            if not messages:
                break
        return done


def restore_changelogs(
    consumer: Consumer,
    consumer_errors: ClientErrors,
    partitions: Iterable[TopicPartitionKey],
    timeout: float = 60.0,
) -> dict[TopicPartitionKey, ChangelogReplay]:
    """Replay each changelog ``(topic, partition)`` from its first record to its end, blocking.

    ``consumer`` is outside any group and raises end-of-partition events (``enable.partition.eof``);
    it is left without the partitions.
    """
    reader = ChangelogReader(consumer, consumer_errors)
    reader.start(partitions)
    done: dict[TopicPartitionKey, ChangelogReplay] = {}
    deadline = time.monotonic() + timeout
    try:
        while reader.replays:
            if time.monotonic() > deadline:
                raise KafkaClientError(
                    f"could not read changelog partitions {sorted(reader.replays)} to their end within "
                    f"{timeout:.0f}s; state cannot be restored"
                )
            done.update(reader.read(0.2))
    finally:
        reader.stop(list(reader.replays))
    return done
