"""A partition paused by the flow control when it is revoked is fetched again when it comes back.

librdkafka keeps an application pause across an incremental unassign and assign, while the worker's
flow control forgets a partition that went (and so would never resume it). Found in S4: after a
scale-out and a scale-in, a worker owned the partitions again and fetched nothing from them for
minutes. The real client against the real broker, with the revoke callback in between exactly as
librdkafka calls it (before the unassign).
"""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, TopicPartition

from cadenza.infra.kafka.clients import make_consumer, make_producer
from cadenza.settings import KafkaSettings
from cadenza.testing.pytest_plugin import NewTopic
from cadenza.worker.kafka.rebalance import Rebalance

pytestmark = pytest.mark.kafka


def consume(consumer: Consumer, wanted: int, timeout: float = 10.0) -> int:
    got = 0
    until = time.monotonic() + timeout
    while got < wanted and time.monotonic() < until:
        got += sum(1 for m in consumer.consume(wanted - got, 0.5) if m.error() is None)
    return got


@pytest.mark.parametrize("how", ["revoked", "lost"])
def test_a_partition_paused_when_it_left_is_fetched_when_it_comes_back(
    kafka_settings: KafkaSettings, new_topic: NewTopic, how: str
) -> None:
    topic = new_topic(partitions=1)
    producer, _ = make_producer(kafka_settings)
    for i in range(10):
        producer.produce(topic, f"r{i}".encode())
    producer.flush(10)
    forgotten: list[list[TopicPartition]] = []

    def forget(partitions: list[TopicPartition]) -> int:
        forgotten.append(partitions)
        return 0

    rebalance = Rebalance(lambda partitions: [], lambda: None, forget)
    consumer, _ = make_consumer(kafka_settings, f"g-{uuid.uuid4().hex[:8]}")
    try:
        consumer.incremental_assign([TopicPartition(topic, 0, 0)])
        assert consume(consumer, 5) == 5
        consumer.pause([TopicPartition(topic, 0)])  # the flow control paused it (buffer full)
        leaving = [TopicPartition(topic, 0)]
        if how == "revoked":
            rebalance.on_revoke(consumer, leaving)
        else:
            rebalance.on_lost(consumer, leaving)
        consumer.incremental_unassign(leaving)
        assert forgotten == [leaving]
        consumer.incremental_assign([TopicPartition(topic, 0, 5)])  # it comes back
        assert consume(consumer, 5) == 5
    finally:
        consumer.close()
