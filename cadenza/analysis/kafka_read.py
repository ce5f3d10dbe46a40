"""Reading activity traces back from the activities topic, for ``cadenza analyze``."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, KafkaError, TopicPartition

from cadenza.analysis.activity import Activity
from cadenza.analysis.trace import decode_batch
from cadenza.errors import CadenzaError
from cadenza.infra.kafka.clients import make_consumer
from cadenza.settings import KafkaSettings

__all__ = ["TraceReader"]

_log = logging.getLogger("cadenza.analysis")


@dataclass
class TraceReader:
    """Reads activity batches of ``topic`` from the batch written at or after ``since`` (epoch seconds;
    ``None``: the beginning). Batches that do not decode are skipped and counted in ``bad_batches``
    (with the reason logged) rather than stopping the analysis of the rest.
    """

    settings: KafkaSettings
    topic: str
    since: float | None = None
    bad_batches: int = 0
    batches: int = 0
    _ends: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._consumer, self._errors = make_consumer(
            self.settings, f"cadenza-analyze-{uuid.uuid4().hex[:8]}", **{"enable.partition.eof": True}
        )
        timeout = self.settings.request_timeout_ms / 1000.0
        metadata = self._consumer.list_topics(self.topic, timeout=timeout)
        info = metadata.topics.get(self.topic)
        if info is None or info.error is not None or not info.partitions:
            self._consumer.close()
            raise CadenzaError(
                f"activities topic {self.topic!r} does not exist (start workers with it first)"
            )
        partitions = sorted(info.partitions)
        if self.since is None:
            start = [TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in partitions]
        else:
            wanted = [TopicPartition(self.topic, p, round(self.since * 1000)) for p in partitions]
            found = self._consumer.offsets_for_times(wanted, timeout=timeout)
            start = [
                TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_END)
                for tp in found
            ]
        for p in partitions:
            self._ends[p] = self._consumer.get_watermark_offsets(
                TopicPartition(self.topic, p), timeout=timeout
            )[1]
        self._consumer.assign(start)
        self._done: set[int] = {p for p, end in self._ends.items() if end == 0}

    def poll(self, timeout: float = 0.2) -> Iterator[Activity]:
        """Activities of the batches that arrived within ``timeout``."""
        self._errors.raise_fatal()
        for message in self._consumer.consume(500, timeout):
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    partition = message.partition()
                    if partition is not None:
                        self._done.add(partition)
                else:
                    _log.warning("reading %s: %s", self.topic, error)
                continue
            partition, offset = message.partition(), message.offset()
            if partition is not None and offset is not None and offset + 1 >= self._ends.get(partition, 0):
                self._done.add(partition)
            self.batches += 1
            try:
                yield from decode_batch(message.value() or b"")
            except ValueError as exc:
                self.bad_batches += 1
                _log.warning("skipping activity batch at %s[%s]@%s: %s", self.topic, partition, offset, exc)

    def read_to_end(self, timeout: float = 30.0) -> list[Activity]:
        """Everything up to the end of the topic as it was when the reader started."""
        deadline = time.monotonic() + timeout
        out: list[Activity] = []
        while len(self._done) < len(self._ends):
            if time.monotonic() > deadline:
                raise CadenzaError(f"could not read {self.topic!r} to its end within {timeout:.0f}s")
            out.extend(self.poll())
        return out

    def close(self) -> None:
        self._consumer.close()
