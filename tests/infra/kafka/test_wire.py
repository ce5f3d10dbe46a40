"""Proof on the wire: records and headers survive a real broker exactly once, in order, committed."""

from __future__ import annotations

import time
import uuid
from collections import defaultdict

import pytest
from confluent_kafka import TopicPartition

from cadenza.infra.kafka.clients import (
    DeliveryReport,
    flush_or_raise,
    make_consumer,
    make_producer,
    raise_for_message_error,
)
from cadenza.infra.kafka.headers import get_header
from cadenza.infra.kafka.offsets import end_offsets
from cadenza.settings import KafkaSettings
from cadenza.testing.pytest_plugin import NewTopic

pytestmark = pytest.mark.kafka

RECORDS = 10_000
PARTITIONS = 4


def test_ten_thousand_records_with_headers_exactly_once_in_order(
    kafka_settings: KafkaSettings, new_topic: NewTopic
) -> None:
    topic = new_topic(partitions=PARTITIONS)
    producer, producer_errors = make_producer(kafka_settings)
    report = DeliveryReport()
    for i in range(RECORDS):
        producer.produce(
            topic,
            value=f"value-{i}".encode(),
            partition=i % PARTITIONS,
            headers=[("seq", str(i).encode()), ("tenant", b"ads"), ("empty", b"")],
            on_delivery=report,
        )
        if i % 500 == 0:
            producer.poll(0)
    flush_or_raise(producer, report, timeout=60)
    producer_errors.raise_fatal()
    assert report.delivered == RECORDS

    consumer, consumer_errors = make_consumer(kafka_settings, group_id=f"wire-{uuid.uuid4().hex[:8]}")
    consumer.subscribe([topic])
    seen: dict[int, list[int]] = defaultdict(list)
    offsets: dict[int, list[int]] = defaultdict(list)
    deadline = time.monotonic() + 90
    try:
        while sum(len(v) for v in seen.values()) < RECORDS and time.monotonic() < deadline:
            consumer_errors.raise_fatal()
            for message in consumer.consume(1000, 0.5):
                if not raise_for_message_error(message):
                    continue
                headers = message.headers()
                seq = int(get_header(headers, "seq") or b"-1")
                assert get_header(headers, "tenant") == b"ads"
                assert get_header(headers, "empty") == b""
                assert message.value() == f"value-{seq}".encode()
                partition, offset = message.partition(), message.offset()
                assert partition is not None and offset is not None
                seen[partition].append(seq)
                offsets[partition].append(offset)
                # Manual commit, synchronous, every 1000 records per partition and at the end.
                if len(seen[partition]) % 1000 == 0:
                    consumer.commit(message=message, asynchronous=False)
        consumer.commit(
            offsets=[TopicPartition(topic, p, offs[-1] + 1) for p, offs in offsets.items()],
            asynchronous=False,
        )
        committed = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
    finally:
        consumer.close()

    for partition in range(PARTITIONS):
        expected = list(range(partition, RECORDS, PARTITIONS))
        assert seen[partition] == expected, f"partition {partition}: records missing, repeated or reordered"
        assert offsets[partition] == list(range(len(expected)))

    ends = end_offsets(kafka_settings, [(topic, p) for p in range(PARTITIONS)])
    assert {tp.partition: tp.offset for tp in committed} == {p: ends[(topic, p)] for p in range(PARTITIONS)}
    assert sum(ends.values()) == RECORDS


def test_end_offsets_count_records_of_multi_record_batches(
    kafka_settings: KafkaSettings, new_topic: NewTopic
) -> None:
    """Ten single-record batches, then one batch of ten: the end is 20 whatever the watermark says."""
    topic = new_topic(partitions=1)
    producer, _ = make_producer(kafka_settings, **{"linger.ms": 50})
    for i in range(10):
        producer.produce(topic, value=str(i).encode(), partition=0)
        producer.flush(10)
    for i in range(10):
        producer.produce(topic, value=str(i).encode(), partition=0)
    flush_or_raise(producer, None, timeout=10)

    assert end_offsets(kafka_settings, [(topic, 0)]) == {(topic, 0): 20}


def test_end_offsets_of_an_empty_partition_is_zero(
    kafka_settings: KafkaSettings, new_topic: NewTopic
) -> None:
    topic = new_topic(partitions=2)
    assert end_offsets(kafka_settings, [(topic, 0), (topic, 1)]) == {(topic, 0): 0, (topic, 1): 0}
