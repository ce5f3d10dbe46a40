"""Producing and consuming test records with plain cadenza clients (the independent side of each check)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import KafkaError, Message, TopicPartition

from cadenza.infra.kafka.clients import flush_or_raise, make_consumer, make_producer, raise_for_message_error
from cadenza.infra.kafka.offsets import end_offsets
from cadenza.settings import KafkaSettings


@dataclass(frozen=True, order=True)
class Record:
    """A record as the broker stored it; ``headers`` is a tuple so records can live in sets."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


def produce(
    settings: KafkaSettings,
    topic: str,
    records: list[tuple[int, bytes | None, bytes, list[tuple[str, bytes]]]],
    *,
    batched: bool,
) -> list[Record]:
    """Produce ``(partition, key, value, headers)`` records; return them with their offsets.

    ``batched`` lingers so the broker gets multi-record batches (where an under-reported high
    watermark shows); otherwise every record is flushed alone, one batch each.
    """
    producer, errors = make_producer(settings, **{"linger.ms": 200 if batched else 0})
    delivered: list[Record] = []
    failures: list[KafkaError] = []

    def on_delivery(headers: list[tuple[str, bytes]]) -> Callable[[KafkaError | None, Message], None]:
        # Delivery reports do not carry headers back, so the produced ones are remembered here.
        def report(error: KafkaError | None, message: Message) -> None:
            if error is not None:
                failures.append(error)
                return
            offset, partition = message.offset(), message.partition()
            assert offset is not None and partition is not None
            delivered.append(
                Record(
                    topic,
                    partition,
                    offset,
                    message.key(),
                    message.value(),
                    tuple(headers),
                )
            )

        return report

    for partition, key, value, headers in records:
        wire_headers: list[tuple[str, str | bytes | None]] = list(headers)
        producer.produce(
            topic,
            value=value,
            key=key,
            partition=partition,
            headers=wire_headers,
            on_delivery=on_delivery(headers),
        )
        if not batched:
            flush_or_raise(producer, None, timeout=30)
    flush_or_raise(producer, None, timeout=30)
    errors.raise_fatal()
    assert not failures, failures
    assert len(delivered) == len(records)
    return sorted(delivered)


def consume_all(settings: KafkaSettings, topic: str, partitions: int, timeout: float = 30.0) -> list[Record]:
    """Every record of ``topic``, read by assignment up to the true end of each partition."""
    ends = end_offsets(settings, [(topic, p) for p in range(partitions)])
    wanted = {key: end for key, end in ends.items() if end > 0}
    consumer, errors = make_consumer(settings, group_id=f"check-{uuid.uuid4().hex[:8]}")
    consumer.assign([TopicPartition(topic, p, 0) for (_t, p) in wanted])
    seen: list[Record] = []
    position = dict.fromkeys(wanted, 0)
    deadline = time.monotonic() + timeout
    try:
        while any(position[key] < end for key, end in wanted.items()):
            assert time.monotonic() < deadline, f"did not read {topic} to {wanted} in {timeout}s: {position}"
            errors.raise_fatal()
            for message in consumer.consume(500, 0.5):
                if not raise_for_message_error(message):
                    continue
                offset, partition = message.offset(), message.partition()
                assert offset is not None and partition is not None
                position[(topic, partition)] = offset + 1
                headers = message.headers()
                seen.append(
                    Record(
                        topic,
                        partition,
                        offset,
                        message.key(),
                        message.value(),
                        tuple(
                            (name, value.encode() if isinstance(value, str) else value)
                            for name, value in headers
                        )
                        if isinstance(headers, list)
                        else (),
                    )
                )
    finally:
        consumer.close()
    return sorted(seen)
