"""Checkpointing: which offsets may be committed, and committing them only once they are durable.

The worker runs records out of offset order (by deadline), so a commit cannot simply take the last
fetched offset. A checkpoint takes the committable offset of each partition (the in-flight
bookkeeping of :mod:`cadenza.worker.engine.inflight`: below it every record's units ran) and the window
changelog writes of the state as it stands, and seals the output's epoch
(:class:`~cadenza.worker.engine.output.Epoch`). Then, without waiting, the worker goes on; each step
moves the oldest open checkpoint on as far as acknowledgements allow:

1. once every record produced before its seal is acknowledged (the outputs of the records below its
   offsets among them), its changelog writes are produced and a new epoch is sealed behind them;
2. once those are acknowledged, its offsets are committed.

So a committed offset always has every output and every state write of the records below it
acknowledged (at-least-once), and a state write is never durable before the outputs it accounts for
(else a restart would skip a record whose result was lost). Checkpoints complete in the order they
were taken, so a key's changelog writes reach the log in order. At most :data:`MAX_OPEN` are open;
a due checkpoint waits for one to finish rather than piling up.

A revocation, a stop and a stopped pipeline need everything durable before they go on: :meth:`commit`
takes a checkpoint and waits for all open ones (flushing the producer), as every checkpoint did
before. Waiting at every checkpoint held the whole worker for the slowest acknowledgement of each
interval; on the embedded broker (Tansu, which acknowledges ``acks=all`` about 100 ms after a record
arrives) that was 100 to 250 ms of every 200 ms commit interval, during which nothing was fetched or run.

This is the one place a commit happens; the worker's rebalance handling calls it on revocation and
forgets partitions here when they go.
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from typing import Any, Protocol

from confluent_kafka import Consumer, TopicPartition

from cadenza.worker.engine.counters import WorkerCounters
from cadenza.worker.engine.inflight import InFlight
from cadenza.worker.engine.operators.stateful import StatefulStep
from cadenza.worker.engine.output import Epoch
from cadenza.worker.kafka.commits import OffsetCommits

__all__ = ["MAX_OPEN", "Checkpoint", "DurableOutput"]

#: Most checkpoints open at once (taken, not yet committed).
MAX_OPEN = 4

#: ``(activity, wall start, wall end, detail)``: the activity trace's recorder.
Record = Callable[[str, float, float, str | None], None]


class DurableOutput(Protocol):
    """What a checkpoint needs of the produce stage (:class:`~cadenza.worker.engine.output.Output`)."""

    def produce(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        headers: list[tuple[str, str | bytes | None]] | None = None,
        partition: int = -1,
    ) -> None: ...

    def flush(self) -> None: ...

    def seal(self) -> Epoch: ...

    def serve(self) -> None: ...

    def raise_failed(self) -> None: ...


#: ``(step, partition, writes)``: one partition's changelog writes, taken with a checkpoint.
ChangelogBatch = tuple[StatefulStep, int, list[Any]]


class _Open:
    """A checkpoint taken and not yet committed."""

    __slots__ = ("changelog", "needs", "offsets")

    def __init__(
        self, offsets: dict[tuple[str, int], int], changelog: list[ChangelogBatch], needs: int
    ) -> None:
        self.offsets = offsets
        #: Its changelog writes while the outputs are not all acknowledged; empty once produced.
        self.changelog = changelog
        #: The seal number whose epoch (and every earlier one) must be acknowledged before it moves on.
        self.needs = needs


class Checkpoint:
    """In-flight records, pending offsets and the stateful steps whose changes a commit writes.

    ``interval`` is the most seconds between commits while the buffer is busy (``commit_interval``).
    """

    __slots__ = (
        "_acked",
        "_counters",
        "_open",
        "_sealed",
        "_seals",
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

    def __init__(
        self,
        counters: WorkerCounters,
        interval: float,
        *,
        inflight: InFlight,
        output: DurableOutput,
        windows: Iterable[StatefulStep] = (),
        dry_interval: float = 0.0,
        record: Record | None = None,
    ) -> None:
        self._counters = counters
        self.interval = interval
        #: The engine's unfinished records (:class:`~cadenza.worker.engine.inflight.InFlight`).
        self.inflight = inflight
        self.offsets = OffsetCommits(counters)
        #: Stateful steps whose touched state is changelogged at each commit (a stopped pipeline's
        #: are removed, so that its changelog stays where a replay from its committed offsets builds).
        self.windows: list[StatefulStep] = list(windows)
        self.output = output
        self.record = record
        #: ``time.monotonic()`` of the last commit.
        self.last = 0.0
        #: Records ran or arrived since the last commit.
        self.pending = False
        #: Least time between two commits made because the buffer ran dry: a trickle of records runs
        #: it dry after each one, and a checkpoint per record would cost more than the record. 0: commit
        #: whenever it runs dry.
        self.dry_interval = dry_interval
        #: Checkpoints taken, oldest first.
        self._open: deque[_Open] = deque()
        #: Sealed epochs not yet known to be acknowledged, oldest first; ``_acked`` of the ``_seals``
        #: epochs sealed so far are (all of the first ``_acked``).
        self._sealed: deque[Epoch] = deque()
        self._seals = 0
        self._acked = 0

    def due(self, now: float, *, worked: bool, buffered: int) -> bool:
        """Whether to commit now: something to commit (records ran or were dead-lettered since the
        last commit, ``worked``, or a commit was deferred by a rebalance), and the buffer ran dry or
        the interval is up."""
        self.pending = pending = self.pending or worked
        since = now - self.last
        return (
            (pending or bool(self.offsets))
            and (since >= self.interval or (not buffered and since >= self.dry_interval))
            and len(self._open) < MAX_OPEN
        )

    @property
    def open(self) -> int:
        """Checkpoints taken and not yet committed."""
        return len(self._open)

    def take(self) -> None:
        """Take a checkpoint without waiting: the committable offsets, the changelog writes of the state
        as it stands, and a seal of the output's epoch; :meth:`advance` commits it once durable."""
        with self._timed():
            self._take()
            self.last = time.monotonic()
            self.pending = False

    def _take(self) -> None:
        output = self.output
        changelog = [
            (window, partition, writes)
            for window in self.windows
            if window.touched
            for partition, writes in window.changelog_writes()
        ]
        self._open.append(_Open(self.inflight.advanced(), changelog, self._seal(output)))

    def advance(self, consumers: Sequence[tuple[Consumer, Collection[str] | None]]) -> None:
        """Move the open checkpoints on as far as acknowledgements allow, without waiting; commit the
        offsets of those that became durable (``consumers`` as for :meth:`commit`)."""
        if not self._open and not self.offsets:
            return
        with self._timed():
            self._advance(consumers)

    def _advance(self, consumers: Sequence[tuple[Consumer, Collection[str] | None]]) -> None:
        output = self.output
        output.serve()
        output.raise_failed()
        durable = False
        while self._open:
            head = self._open[0]
            if not self._acknowledged(head.needs):
                break
            if head.changelog:
                self._write(output, head.changelog)
                head.changelog = []
                head.needs = self._seal(output)
                continue
            self.offsets.positions.update(head.offsets)
            self._open.popleft()
            durable = True
        if durable:
            for consumer, topics in consumers:
                self.offsets.commit(consumer, topics)

    def commit(self, consumers: Sequence[tuple[Consumer, Collection[str] | None]]) -> None:
        """Take a checkpoint and wait until it and every open one are committed: outputs acknowledged,
        then state changelogged, then offsets committed, each lane's through its own consumer
        (``consumers``: each with the topics it reads, ``None`` for all of them; none once they are
        closed, then only outputs and state are made durable)."""
        with self._timed():
            self._commit(consumers)
            self.last = time.monotonic()
            self.pending = False

    def _commit(self, consumers: Sequence[tuple[Consumer, Collection[str] | None]]) -> None:
        output = self.output
        self._take()
        output.flush()
        written = False
        for checkpoint in self._open:
            if checkpoint.changelog:
                self._write(output, checkpoint.changelog)
                checkpoint.changelog = []
                written = True
        if written:
            output.flush()
        for checkpoint in self._open:
            self.offsets.positions.update(checkpoint.offsets)
        self._open.clear()
        self._sealed.clear()
        self._acked = self._seals
        for consumer, topics in consumers:
            self.offsets.commit(consumer, topics)

    def _seal(self, output: DurableOutput) -> int:
        self._sealed.append(output.seal())
        self._seals += 1
        return self._seals

    def _acknowledged(self, seal: int) -> bool:
        """Whether the epoch of seal number ``seal`` and every earlier one are acknowledged."""
        sealed = self._sealed
        while sealed and sealed[0].unacked <= 0:
            sealed.popleft()
            self._acked += 1
        return self._acked >= seal

    @staticmethod
    def _write(output: DurableOutput, changelog: list[ChangelogBatch]) -> None:
        for window, partition, writes in changelog:
            topic = window.changelog_topic
            for key, value in writes:
                output.produce(topic, value, key, None, partition)

    @contextlib.contextmanager
    def _timed(self) -> Iterator[None]:
        """Time a checkpoint call into ``commit_ms`` and the activity trace (``fault_tolerance``)."""
        started = time.monotonic()
        wall_started = time.time()
        try:
            yield
        finally:
            now = time.monotonic()
            if self.record is not None:
                self.record("fault_tolerance", wall_started, wall_started + (now - started), None)
            self._counters.commit_ms += round((now - started) * 1000)

    def forget(
        self, partitions: Iterable[TopicPartition], state: Collection[tuple[StatefulStep, int]] = ()
    ) -> None:
        """Partitions this worker no longer owns: their pending offsets and in-flight records go, and
        from the open checkpoints their offsets and the changelog writes of ``state`` (the stateful
        steps' partitions they feed): the next owner restores from the changelog and replays from the
        committed offset, and a stale write landing after its own would undo its state."""
        gone = list(partitions)
        self.offsets.forget(gone)
        self.inflight.forget((tp.topic, tp.partition) for tp in gone)
        keys = {(tp.topic, tp.partition) for tp in gone}
        drop = {(id(window), partition) for window, partition in state}
        for checkpoint in self._open:
            for key in keys & checkpoint.offsets.keys():
                del checkpoint.offsets[key]
            if drop and checkpoint.changelog:
                checkpoint.changelog = [
                    batch for batch in checkpoint.changelog if (id(batch[0]), batch[1]) not in drop
                ]

    def stop_changelogging(self, windows: Iterable[StatefulStep]) -> None:
        """Stop writing these steps' changes (a stopped pipeline's): see :attr:`windows`."""
        ids = {id(window) for window in windows}
        self.windows = [window for window in self.windows if id(window) not in ids]
