"""The true end offset of partitions, even on brokers that under-report the high watermark.

Some Kafka-compatible brokers (Tansu 0.6) report the high watermark as "base offset of the last
record batch + 1" instead of "last offset + 1". Deciding "caught up" from the watermark alone would
then stop early. The end is found by reading: start at ``watermark - 1`` (inside the last batch, or
the last record on a correct broker), read until the partition reports EOF, and take the last offset
seen + 1. On a correct broker this returns the watermark itself.
"""

from __future__ import annotations

import time
import uuid

from confluent_kafka import TopicPartition

from cadenza.infra.kafka.clients import make_consumer, raise_for_message_error
from cadenza.infra.kafka.errors import KafkaClientError
from cadenza.settings import KafkaSettings


def end_offsets(
    settings: KafkaSettings, partitions: list[tuple[str, int]], timeout: float = 30.0
) -> dict[tuple[str, int], int]:
    """The offset one past the last record of each ``(topic, partition)``."""
    consumer, errors = make_consumer(
        settings,
        group_id=f"cadenza-end-offsets-{uuid.uuid4().hex}",
        **{"enable.partition.eof": True, "fetch.wait.max.ms": 50},
    )
    try:
        ends: dict[tuple[str, int], int] = {}
        assignment: list[TopicPartition] = []
        per_call = max(1.0, timeout / 2)
        for topic, partition in partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=per_call)
            ends[(topic, partition)] = high
            if high > low:
                assignment.append(TopicPartition(topic, partition, high - 1))
        if not assignment:
            return ends
        consumer.assign(assignment)
        waiting = {(tp.topic, tp.partition) for tp in assignment}
        deadline = time.monotonic() + timeout
        while waiting:
            if time.monotonic() > deadline:
                raise KafkaClientError(
                    f"could not read to the end of {sorted(waiting)} within {timeout:.0f}s"
                )
            errors.raise_fatal()
            message = consumer.poll(0.2)
            if message is None:
                continue
            key = (message.topic(), message.partition())
            if key not in ends:
                continue
            offset = message.offset()
            if offset is None:
                continue
            if raise_for_message_error(message):
                ends[key] = max(ends[key], offset + 1)
            else:
                ends[key] = max(ends[key], offset)
                waiting.discard(key)
        return ends
    finally:
        consumer.close()
