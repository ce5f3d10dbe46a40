"""An in-memory Kafka transport: the worker's producer and fetched records without a broker.

The broker-free test driver (:class:`cadenza.testing.PipelineDriver`) runs the worker's own plan,
operators, policy and scheduler; only the transport is swapped, at the seam the worker already has:
:class:`MemoryProducer` stands in for the confluent-kafka ``Producer`` behind
:class:`~cadenza.worker.engine.output.Output` (via :meth:`Output.over
<cadenza.worker.engine.output.Output.over>`),
and the records it holds are handed back as real ``confluent_kafka.Message`` objects, which is what
the decode stage reads.

Partitioning is the producer's: a record produced to partition ``-1`` goes where librdkafka's default
``consistent_random`` partitioner puts it, ``crc32(key) % partitions`` (the same CRC-32 as
:func:`zlib.crc32`); a record without a key, which librdkafka would put on a random partition, goes to
partition 0 here, so runs are deterministic. Offsets count up per partition from 0 and timestamps
are the clock's time when the record was produced (a producer that sets none gets its send time).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import TIMESTAMP_CREATE_TIME, Message

from cadenza.errors import CadenzaError

__all__ = ["MemoryProducer", "MemoryTopics", "StoredRecord", "partition_for"]

Headers = list[tuple[str, bytes | None]]


def partition_for(key: bytes | None, partitions: int) -> int:
    """The partition librdkafka's default partitioner picks for ``key`` (0 for no key, see above)."""
    if key is None:
        return 0
    return zlib.crc32(key) % partitions


@dataclass(frozen=True, slots=True)
class StoredRecord:
    """One record as a topic holds it."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Headers
    #: Milliseconds since the epoch, as Kafka timestamps are.
    timestamp_ms: int

    def message(self) -> Message:
        """The record as the consumer would return it."""
        return Message(
            topic=self.topic,
            partition=self.partition,
            offset=self.offset,
            key=self.key,
            value=self.value,
            headers=list(self.headers) or None,
            timestamp=(TIMESTAMP_CREATE_TIME, self.timestamp_ms),
        )


class MemoryTopics:
    """Topics as lists of records per partition; every record ever written stays readable."""

    def __init__(self, partitions: dict[str, int], clock: Callable[[], float]) -> None:
        self.partitions = dict(partitions)
        self.clock = clock
        self.records: dict[str, list[list[StoredRecord]]] = {}

    def count(self, topic: str) -> int:
        count = self.partitions.get(topic)
        if count is None:
            raise CadenzaError(
                f"topic {topic!r} is not read or written by the pipelines under test; known topics: "
                f"{sorted(self.partitions)}"
            )
        return count

    def append(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        headers: Headers,
        *,
        partition: int = -1,
        timestamp_ms: int | None = None,
    ) -> StoredRecord:
        count = self.count(topic)
        if partition < 0:
            partition = partition_for(key, count)
        elif partition >= count:
            raise CadenzaError(f"topic {topic!r} has {count} partition(s); there is no partition {partition}")
        log = self.records.setdefault(topic, [[] for _ in range(count)])[partition]
        stamp = round(self.clock() * 1000) if timestamp_ms is None else timestamp_ms
        record = StoredRecord(topic, partition, len(log), key, value, headers, stamp)
        log.append(record)
        return record

    def read(self, topic: str) -> list[StoredRecord]:
        """Every record of ``topic``, partition by partition, each in offset order."""
        return [record for log in self.records.get(topic, ()) for record in log]


class MemoryProducer:
    """The subset of the confluent-kafka ``Producer`` the worker's output uses, writing to
    :class:`MemoryTopics`; ``sent`` collects what was produced since the driver last took it."""

    def __init__(self, topics: MemoryTopics) -> None:
        self.topics = topics
        self.sent: list[StoredRecord] = []

    def produce(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        partition: int = -1,
        *,
        headers: list[tuple[str, Any]] | None = None,
        **_: Any,
    ) -> None:
        stored: Headers = [
            (name, item.encode() if isinstance(item, str) else item) for name, item in headers or ()
        ]
        self.sent.append(self.topics.append(topic, value, key, stored, partition=partition))

    def take(self) -> list[StoredRecord]:
        sent, self.sent = self.sent, []
        return sent

    def poll(self, *_: Any, **__: Any) -> int:
        return 0

    def flush(self, *_: Any, **__: Any) -> int:
        return 0

    def __len__(self) -> int:
        return 0  # everything is "acknowledged" at once: no backpressure
