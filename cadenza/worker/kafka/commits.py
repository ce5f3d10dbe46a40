"""The commit stage: the next offset of every partition a batch read, committed after the batch.

Offsets are only ever committed by :meth:`OffsetCommits.commit`, which the worker calls once the
batch's outputs and state writes are acknowledged; so a committed offset never runs ahead of what is
durable. A commit refused because the group is rebalancing is not an error: the offsets stay pending
and go out with the next commit (or, when the partition moves, its next owner processes those records
again, which at-least-once allows).
"""

from __future__ import annotations

import logging
from collections.abc import Collection

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from cadenza.infra.kafka.errors import from_kafka_exception
from cadenza.worker.engine.counters import WorkerCounters

__all__ = ["OffsetCommits"]

_log = logging.getLogger("cadenza.worker")

#: Commit failures that only mean "the group is rebalancing (or there was nothing to commit)".
_REBALANCE_ERRORS = frozenset(
    {
        KafkaError.REBALANCE_IN_PROGRESS,
        KafkaError.ILLEGAL_GENERATION,
        KafkaError.UNKNOWN_MEMBER_ID,
        KafkaError._NO_OFFSET,
        KafkaError._ASSIGNMENT_LOST,
    }
)


class OffsetCommits:
    """Pending offsets per ``(topic, partition)``; the run stage writes :attr:`positions` directly."""

    __slots__ = ("_counters", "positions")

    def __init__(self, counters: WorkerCounters) -> None:
        self.positions: dict[tuple[str, int], int] = {}
        self._counters = counters

    def __bool__(self) -> bool:
        return bool(self.positions)

    def commit(self, consumer: Consumer, topics: Collection[str] | None = None) -> None:
        """Commit the pending offsets of ``topics`` (all if ``None``) synchronously through
        ``consumer`` (the one that owns their partitions); raise on errors other than a rebalance."""
        positions = self.positions
        if topics is None:
            pending = dict(positions)
        else:
            pending = {key: offset for key, offset in positions.items() if key[0] in topics}
        if not pending:
            return
        for key in pending:
            del positions[key]
        offsets = [TopicPartition(topic, partition, offset) for (topic, partition), offset in pending.items()]
        try:
            results = consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if isinstance(error, KafkaError) and error.code() in _REBALANCE_ERRORS:
                _log.warning("commit deferred while the group rebalances (%s)", error.name())
                for key, offset in pending.items():
                    positions.setdefault(key, offset)
                return
            raise from_kafka_exception(exc, "committing offsets") from None
        for result in results or ():
            if result.error is not None:
                _log.warning("commit of %s[%s] failed: %s", result.topic, result.partition, result.error)
        self._counters.commits += 1

    def forget(self, partitions: list[TopicPartition]) -> None:
        """Drop the pending offsets of partitions this worker no longer owns."""
        for tp in partitions:
            self.positions.pop((tp.topic, tp.partition), None)
