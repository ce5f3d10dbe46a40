"""Reading a whole topic back with an assigned consumer (no group join), with a bounded wait."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import OFFSET_BEGINNING, Message, TopicPartition

from cadenza.infra.kafka.clients import make_consumer, raise_for_message_error
from cadenza.infra.kafka.offsets import end_offsets
from cadenza.settings import KafkaSettings


def read_all(settings: KafkaSettings, topic: str, partitions: int, timeout: float = 30.0) -> list[Message]:
    """Every record of ``topic``: up to its true end offsets, which are taken first."""
    ends = end_offsets(settings, [(topic, p) for p in range(partitions)], timeout=timeout)
    expected = sum(ends.values())
    consumer, errors = make_consumer(settings, group_id=f"read-{uuid.uuid4().hex[:8]}")
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    records: list[Message] = []
    deadline = time.monotonic() + timeout
    try:
        while len(records) < expected and time.monotonic() < deadline:
            errors.raise_fatal()
            for message in consumer.consume(1000, 0.2):
                if raise_for_message_error(message):
                    records.append(message)
    finally:
        consumer.close()
    assert len(records) == expected, f"read {len(records)} of {expected} records of {topic}"
    return records
