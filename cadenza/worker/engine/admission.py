"""What the worker's admit stage keeps per partition while it decodes one fetched batch.

Admission runs once per record, so what it can do once per batch or per run of records it should.
Records of one partition that reach one sub-topology in one batch are queued when the batch has
been decoded, one :meth:`~cadenza.scheduling.Scheduler.enqueue_run` per run of records sharing a
context, instead of one queue call per record. The scheduling order is unchanged: runs are queued
per operator-partition in offset order, and partitions in the order their first record appeared, so
every partition enters contention exactly when it would have record by record.

A source record without headers whose Kafka timestamp equals the previous record's (in the same
batch and partition) gets the very context the previous one got (see
:meth:`~cadenza.worker.engine.context_stamps.TaskSchedule.context`, whose sharing rule this memoises), and
its fetch latency is the previous one's too (the same timestamp against the same admission time),
so it is counted and added to the histogram once for the run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cadenza.scheduling.context import SchedulingContext

if TYPE_CHECKING:
    from cadenza.scheduling.scheduler import Scheduler
    from cadenza.worker.engine.context_stamps import TaskSchedule
    from cadenza.worker.engine.executor import SchedKey
    from cadenza.worker.engine.inflight import PartitionProgress, Pending
    from cadenza.worker.engine.plan import Decode
    from cadenza.worker.engine.unit import Unit

__all__ = ["PartitionBatch", "StageBatch"]


class StageBatch:
    """One sub-topology's records of one partition in the batch being admitted."""

    __slots__ = (
        "ctx",
        "decode",
        "hits",
        "key",
        "schedule",
        "segments",
        "shared",
        "shares",
        "stamp",
        "units",
        "waited",
    )

    def __init__(self, decode: Decode, schedule: TaskSchedule, partition: int) -> None:
        self.decode = decode
        self.schedule = schedule
        self.key: SchedKey = schedule.keys.get(partition) or schedule.key(partition)
        #: Whether a source record without headers shares the context of the record before it with
        #: the same timestamp (a windowed source's records need their own window close each).
        self.shares = schedule.shares_source_contexts and schedule.release is None
        #: The Kafka timestamp (ms) the shared context is for; ``None`` while there is none.
        self.stamp: int | None = None
        self.shared: SchedulingContext | None = None
        #: Records that took the shared context: counted and timed once, in :meth:`queue`.
        self.hits = 0
        #: Their fetch latency (seconds), ``None`` if it is not observed (no usable timestamp).
        self.waited: float | None = None
        #: Runs queued so far: ``(context, units)``, in offset order; the last one is being filled.
        self.segments: list[tuple[SchedulingContext, list[Unit]]] = []
        self.ctx: SchedulingContext | None = None
        self.units: list[Unit] = []

    def remember(self, stamp: int, ctx: SchedulingContext, waited: float | None) -> None:
        """The context (and fetch latency) the next records with timestamp ``stamp`` share."""
        self._count_hits()
        self.stamp = stamp
        self.shared = ctx
        self.waited = waited

    def queue(self, scheduler: Scheduler[SchedKey, Unit]) -> None:
        """Queue the batch's runs and count what the shared records left to count."""
        self._count_hits()
        key = self.key
        for ctx, units in self.segments:
            scheduler.enqueue_run(key, ctx, units)

    def _count_hits(self) -> None:
        hits = self.hits
        if not hits:
            return
        self.hits = 0
        schedule = self.schedule
        schedule.metrics.consumed += hits
        if self.waited is not None:
            schedule.arrival.observe_many(self.waited, hits)


class PartitionBatch:
    """One partition's state while a batch is admitted: its in-flight entry and its stages."""

    __slots__ = ("holds", "progress", "run", "stages")

    def __init__(
        self,
        progress: PartitionProgress,
        holds: int,
        stages: tuple[StageBatch, ...],
        run: Pending | None,
    ) -> None:
        self.progress = progress
        #: Stopped pipelines reading the partition's topic: their share of a record never completes.
        self.holds = holds
        self.stages = stages
        #: The pending entry the batch's records share, when they can (see
        #: :mod:`cadenza.worker.engine.inflight`).
        self.run = run
