"""Checkpointing: which offsets may be committed, and committing them only once they are durable.

The worker runs records out of offset order (by deadline), so a commit cannot simply take the last
fetched offset. A checkpoint takes the committable offset of each partition first (the in-flight
bookkeeping of :mod:`cadenza.worker.inflight`: below it every record's units ran), then flushes the
producer (which raises if any output was not acknowledged), writes and flushes the window
changelogs, and only then commits the offsets (:mod:`cadenza.worker.commits`). So a committed offset
always has every output and every state write of the records below it acknowledged: at-least-once.

Offsets are collected before the flush on purpose: records that finish while the producer flushes
are committed next time, since their outputs may have been produced after the flush began.

This is the one place a commit happens; the worker's rebalance handling calls it on revocation and
forgets partitions here when they go.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Protocol

from confluent_kafka import Consumer, TopicPartition

from cadenza.worker.commits import OffsetCommits
from cadenza.worker.counters import WorkerCounters
from cadenza.worker.inflight import InFlight
from cadenza.worker.operators.stateful import StatefulStep

__all__ = ["Checkpoint", "DurableOutput"]

#: ``(activity, wall start, wall end, detail)``: the activity trace's recorder.
Record = Callable[[str, float, float, str | None], None]


class DurableOutput(Protocol):
    """What a checkpoint needs of the produce stage (:class:`~cadenza.worker.output.Output`)."""

    def produce(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        headers: list[tuple[str, str | bytes | None]] | None = None,
        partition: int = -1,
    ) -> None: ...

    def flush(self) -> None: ...


class Checkpoint:
    """In-flight records, pending offsets and the stateful steps whose changes a commit writes.

    ``interval`` is the most seconds between commits while the buffer is busy (``commit_interval``).
    """

    __slots__ = (
        "_counters",
        "dry_interval",
        "inflight",
        "interval",
        "last",
        "offsets",
        "output",
        "pending",
        "record",
        "windows",
    )

    def __init__(self, counters: WorkerCounters, interval: float) -> None:
        self._counters = counters
        self.interval = interval
        self.inflight = InFlight()
        self.offsets = OffsetCommits(counters)
        #: Stateful steps whose touched state is changelogged at each commit (a stopped pipeline's
        #: are removed, so that its changelog stays where a replay from its committed offsets builds).
        self.windows: list[StatefulStep] = []
        #: Set when the worker starts (the producer is made then).
        self.output: DurableOutput | None = None
        self.record: Record | None = None
        #: ``time.monotonic()`` of the last commit.
        self.last = 0.0
        #: Records ran or arrived since the last commit.
        self.pending = False
        #: Least time between two commits made because the buffer ran dry: a trickle of records runs
        #: it dry after each one, and a commit (it waits for the producer) per record would hold the
        #: loop. 0: commit whenever it runs dry.
        self.dry_interval = 0.0

    def due(self, now: float, *, worked: bool, buffered: int) -> bool:
        """Whether to commit now: something to commit (records ran or were dead-lettered since the
        last commit, ``worked``, or a commit was deferred by a rebalance), and the buffer ran dry or
        the interval is up."""
        self.pending = pending = self.pending or worked
        since = now - self.last
        return (pending or bool(self.offsets)) and (
            since >= self.interval or (not buffered and since >= self.dry_interval)
        )

    def collect(self) -> dict[tuple[str, int], int]:
        """Move the offsets that became committable into the pending commit; returns them."""
        moved = self.inflight.advanced()
        self.offsets.positions.update(moved)
        return moved

    def commit(self, consumers: Sequence[tuple[Consumer, Collection[str] | None]]) -> None:
        """Outputs acknowledged, then state changelogged, then offsets committed: each lane's through
        its own consumer (``consumers``: each with the topics it reads, ``None`` for all of them;
        none once they are closed, then only outputs and state are made durable)."""
        output = self.output
        if output is None:
            raise RuntimeError("the checkpoint has no output yet")
        started = time.monotonic()
        wall_started = time.time()
        self.collect()
        touched = [window for window in self.windows if window.touched]
        if touched:
            output.flush()
            for window in touched:
                topic = window.changelog_topic
                for partition, writes in window.changelog_writes():
                    for key, value in writes:
                        output.produce(topic, value, key, None, partition)
        output.flush()
        for consumer, topics in consumers:
            self.offsets.commit(consumer, topics)
        self.last = now = time.monotonic()
        self.pending = False
        if self.record is not None:
            self.record("fault_tolerance", wall_started, wall_started + (now - started), None)
        self._counters.commit_ms += round((now - started) * 1000)

    def forget(self, partitions: Iterable[TopicPartition]) -> None:
        """Partitions this worker no longer owns: their pending offsets and in-flight records go."""
        gone = list(partitions)
        self.offsets.forget(gone)
        self.inflight.forget((tp.topic, tp.partition) for tp in gone)

    def stop_changelogging(self, windows: Iterable[StatefulStep]) -> None:
        """Stop writing these steps' changes (a stopped pipeline's): see :attr:`windows`."""
        ids = {id(window) for window in windows}
        self.windows = [window for window in self.windows if id(window) not in ids]
