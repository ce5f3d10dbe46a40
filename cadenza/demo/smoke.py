"""The worker-less broker round trip behind ``cadenza demo --smoke``.

It proves the plumbing a newcomer needs first: a broker answers, topics get created, records with
headers go out and come back through a consumer group with manual commits. It says plainly that no
pipeline, worker or scheduler is involved yet.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import TopicPartition

from cadenza.infra.kafka.clients import (
    DeliveryReport,
    flush_or_raise,
    make_admin,
    make_consumer,
    make_producer,
    raise_for_message_error,
)
from cadenza.infra.kafka.errors import KafkaClientError
from cadenza.infra.kafka.headers import get_header
from cadenza.infra.kafka.topics import TopicSpec, ensure_topics
from cadenza.settings import KafkaSettings

Progress = Callable[[str, int], None]


@dataclass(frozen=True)
class SmokeResult:
    topic: str
    partitions: int
    produced: int
    consumed: int
    headers_ok: int
    produce_seconds: float
    consume_seconds: float
    committed: dict[int, int]


def run_smoke(
    settings: KafkaSettings,
    *,
    records: int = 10_000,
    partitions: int = 4,
    progress: Progress | None = None,
    timeout: float = 60.0,
) -> SmokeResult:
    """Produce ``records`` with headers, consume them back in a group, commit; count what came back."""
    report = progress or (lambda _stage, _n: None)
    topic = f"cadenza-smoke-{uuid.uuid4().hex[:8]}"
    ensure_topics(make_admin(settings), [TopicSpec(topic, partitions=partitions)])

    producer, producer_errors = make_producer(settings)
    delivery = DeliveryReport()
    started = time.perf_counter()
    for i in range(records):
        producer.produce(
            topic,
            key=str(i % 97).encode(),
            value=f'{{"n": {i}}}'.encode(),
            headers=[("cadenza-smoke-seq", str(i).encode())],
            on_delivery=delivery,
        )
        if i % 1000 == 999:
            producer.poll(0)
            report("produce", 1000)
    flush_or_raise(producer, delivery, timeout)
    producer_errors.raise_fatal()
    report("produce", records % 1000)
    produce_seconds = time.perf_counter() - started

    consumer, consumer_errors = make_consumer(settings, group_id=f"{topic}-group")
    consumer.subscribe([topic])
    consumed = headers_ok = 0
    started = time.perf_counter()
    deadline = time.monotonic() + timeout
    positions: dict[int, int] = {}
    try:
        while consumed < records:
            if time.monotonic() > deadline:
                raise KafkaClientError(
                    f"only {consumed} of {records} records came back within {timeout:.0f}s"
                )
            consumer_errors.raise_fatal()
            for message in consumer.consume(500, 0.5):
                if not raise_for_message_error(message):
                    continue
                consumed += 1
                if get_header(message.headers(), "cadenza-smoke-seq") is not None:
                    headers_ok += 1
                partition, offset = message.partition(), message.offset()
                if partition is not None and offset is not None:
                    positions[partition] = offset + 1
                report("consume", 1)
        consumer.commit(
            offsets=[TopicPartition(topic, p, o) for p, o in positions.items()], asynchronous=False
        )
        committed = {
            tp.partition: tp.offset
            for tp in consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        }
    finally:
        consumer.close()
    return SmokeResult(
        topic=topic,
        partitions=partitions,
        produced=delivery.delivered,
        consumed=consumed,
        headers_ok=headers_ok,
        produce_seconds=produce_seconds,
        consume_seconds=time.perf_counter() - started,
        committed=committed,
    )
