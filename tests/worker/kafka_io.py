"""Helpers for worker tests against the real broker: run a worker in a thread, produce, read back.

Reading back uses consumers that are *assigned* every partition of the topics (no group), so a test
does not wait for a second group join; every wait is bounded.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from confluent_kafka import OFFSET_BEGINNING, TIMESTAMP_CREATE_TIME, KafkaError, Message, TopicPartition

from cadenza.infra.kafka.clients import (
    DeliveryReport,
    flush_or_raise,
    make_admin,
    make_consumer,
    make_producer,
)
from cadenza.infra.kafka.headers import headers_as_dict
from cadenza.settings import KafkaSettings
from cadenza.worker import Worker

#: (key, value, partition) of a record to produce; partition None lets the partitioner choose.
Outgoing = tuple[bytes | None, bytes | None, int | None]


def fetched(topic: str, partition: int, offset: int, value: bytes, timestamp_ms: int) -> Message:
    """A record as a consumer returns it (no key, no headers), built in memory to hand a started
    worker's ``admit``: a test then chooses the interleaving and the offsets."""
    return Message(
        topic=topic,
        partition=partition,
        offset=offset,
        key=None,
        value=value,
        headers=None,
        timestamp=(TIMESTAMP_CREATE_TIME, timestamp_ms),
    )


@dataclass(frozen=True)
class Record:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: dict[str, bytes | None]
    #: The record's Kafka timestamp in seconds (CreateTime: when its producer produced it).
    timestamp: float = 0.0

    def header(self, name: str) -> str:
        value = self.headers.get(name)
        assert value is not None, f"header {name!r} missing from {self}"
        return value.decode()


def produce(settings: KafkaSettings, topic: str, records: Sequence[Outgoing]) -> list[int]:
    """Produce in order and return each record's offset."""
    producer, errors = make_producer(settings)
    offsets: list[int] = [-1] * len(records)
    report = DeliveryReport()

    def delivered(index: int) -> Callable[..., None]:
        def callback(error: KafkaError | None, message: Message) -> None:
            report(error, message)
            offset = message.offset()
            if error is None and offset is not None:
                offsets[index] = offset

        return callback

    for index, (key, value, partition) in enumerate(records):
        producer.produce(
            topic, value, key, partition if partition is not None else -1, on_delivery=delivered(index)
        )
    flush_or_raise(producer, report, timeout=30)
    errors.raise_fatal()
    return offsets


class Reader:
    """Reads whole topics from the beginning, accumulating what arrived so far."""

    def __init__(self, settings: KafkaSettings, topics: Sequence[str]) -> None:
        metadata = make_admin(settings).list_topics(timeout=10)
        assignment = [
            TopicPartition(topic, partition, OFFSET_BEGINNING)
            for topic in topics
            for partition in metadata.topics[topic].partitions
        ]
        self.consumer, self.errors = make_consumer(settings, f"reader-{uuid.uuid4().hex[:8]}")
        self.consumer.assign(assignment)
        self.records: dict[str, list[Record]] = {topic: [] for topic in topics}

    def poll(self, timeout: float = 0.2) -> None:
        self.errors.raise_fatal()
        for message in self.consumer.consume(1000, timeout):
            if message.error() is not None:
                continue
            topic, partition, offset = message.topic(), message.partition(), message.offset()
            assert topic is not None and partition is not None and offset is not None
            headers = message.headers()
            assert not isinstance(headers, dict)
            self.records[topic].append(
                Record(
                    topic,
                    partition,
                    offset,
                    message.key(),
                    message.value(),
                    headers_as_dict([(k, v.encode() if isinstance(v, str) else v) for k, v in headers or ()]),
                    message.timestamp()[1] / 1000.0,
                )
            )

    def wait_for(self, done: Callable[[dict[str, list[Record]]], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not done(self.records):
            if time.monotonic() > deadline:
                counts = {topic: len(records) for topic, records in self.records.items()}
                raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; have {counts}")
            self.poll()

    def settle(self, seconds: float = 1.0) -> None:
        """Keep reading for a while, to catch records that should not be there."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.poll(0.1)

    def close(self) -> None:
        self.consumer.close()


@contextlib.contextmanager
def reading(settings: KafkaSettings, topics: Sequence[str]) -> Iterator[Reader]:
    reader = Reader(settings, topics)
    try:
        yield reader
    finally:
        reader.close()


def committed(settings: KafkaSettings, group: str, topic: str, partitions: int) -> list[int]:
    """The offsets ``group`` has committed for each partition of ``topic`` (negative: none yet)."""
    consumer, _ = make_consumer(settings, group)
    try:
        wanted = [TopicPartition(topic, p) for p in range(partitions)]
        return [tp.offset for tp in consumer.committed(wanted, 10)]
    finally:
        consumer.close()


@contextlib.contextmanager
def running(worker: Worker, join_timeout: float | None = 30.0) -> Iterator[Worker]:
    """Run ``worker`` in a thread until the block ends; re-raise what the worker raised. The block
    starts once the worker has partitions (``join_timeout``; None: at once, e.g. a worker in plan
    ownership that is given partitions only later)."""
    failure: list[BaseException] = []

    def target() -> None:
        try:
            worker.run()
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=target, name="cadenza-test-worker", daemon=True)
    thread.start()
    try:
        if join_timeout is not None and not worker.wait_assigned(join_timeout):
            raise AssertionError(f"the worker got no partitions within {join_timeout:.0f}s: {failure}")
        yield worker
    finally:
        worker.stop()
        thread.join(30)
        assert not thread.is_alive(), "the worker did not stop within 30 s"
    if failure:
        raise failure[0]
