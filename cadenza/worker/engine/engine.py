"""The engine: decode, admit, run and produce the records a transport hands it.

One engine runs every pipeline of a worker, and the same engine runs them under
:class:`cadenza.testing.PipelineDriver`: only the transport differs (the Kafka consumers and
producers of :class:`cadenza.worker.runtime.Worker`, or the in-memory topics of
:mod:`cadenza.worker.engine.memory`). So admission, the run stage, timers, progress records, a
pipeline's stop, dead letters and late records are written once, here, and a test through the driver
exercises the code a worker runs in production.

The engine is built complete from a :class:`~cadenza.worker.engine.plan.WorkerPlan` and an
:class:`EngineTransport`: nothing is assigned into it afterwards. It knows nothing of consumer
groups; what its transport owns (which partitions are paused or wait for their state) it asks
through the transport's small callables.
"""

from __future__ import annotations

import logging
import math
import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from confluent_kafka import Message

from cadenza.infra.kafka.clients import raise_for_message_error
from cadenza.infra.kafka.errors import KafkaClientError
from cadenza.scheduling.context import SchedulingContext, trace_id_bits
from cadenza.scheduling.policy import SchedulingPolicy
from cadenza.scheduling.scheduler import Scheduler
from cadenza.worker.engine.admission import PartitionBatch, StageBatch
from cadenza.worker.engine.context_stamps import TaskSchedule
from cadenza.worker.engine.counters import WorkerCounters
from cadenza.worker.engine.dead_letter import PipelineStoppedError
from cadenza.worker.engine.executor import Executor, Record, SchedKey
from cadenza.worker.engine.idle_clock import IdleClock
from cadenza.worker.engine.inflight import InFlight, Pending
from cadenza.worker.engine.plan import Decode, WorkerPlan
from cadenza.worker.engine.progress import ProgressSender, Waiting
from cadenza.worker.engine.running import IDLE, UNKNOWN, idle_words
from cadenza.worker.engine.unit import Unit
from cadenza.worker.engine.wire import is_progress

if TYPE_CHECKING:
    from cadenza.infra.metrics.emitter import SpanEmitter
    from cadenza.worker.engine.operators.parallel_step import ParallelOp
    from cadenza.worker.engine.operators.stateful import StatefulStep
    from cadenza.worker.engine.task import Task

__all__ = ["Engine", "EngineTransport", "RunHooks"]

_INF = math.inf
_log = logging.getLogger("cadenza.worker")


class Producing(Protocol):
    """The engine's side of the producer: whether it pushes back (no quantum starts meanwhile)."""

    @property
    def pressure(self) -> bool: ...


def _none_waiting(_topic: str) -> Sequence[int]:
    return ()


def _log_transient(exc: KafkaClientError) -> None:
    _log.warning("transient consumer error: %s", exc)


def _nothing_to_hold(stopped: PipelineStoppedError, schedules: Sequence[TaskSchedule], dropped: int) -> None:
    del stopped, schedules, dropped


@dataclass(frozen=True, slots=True)
class EngineTransport:
    """What the engine needs of the records' transport.

    ``output`` is where the operators produce (the plan's operators hold it already; the engine
    reads its back-pressure). ``waiting(topic)``: the assigned partitions of ``topic`` whose records
    wait in the worker, paused or restoring (heartbeats go out for them); ``now``: the wall clock
    admission stamps contexts with (epoch seconds; the driver's virtual clock).
    """

    output: Producing
    waiting: Waiting = _none_waiting
    now: Callable[[], float] = time.time
    #: Called with a retriable consumer error found on a fetched record (which is skipped).
    transient: Callable[[KafkaClientError], None] = _log_transient
    #: Called when a pipeline stopped, with its schedules and the queued units dropped: the worker
    #: keeps those inputs paused and their state out of the changelog, and says so.
    stopped: Callable[[PipelineStoppedError, Sequence[TaskSchedule], int], None] = _nothing_to_hold


@dataclass(frozen=True, slots=True)
class RunHooks:
    """Side features of the run stage, each optional: spans, the activity trace's recorder, and the
    crash slot's words and partition tags (:mod:`cadenza.worker.engine.running`)."""

    emitter: SpanEmitter | None = None
    record: Record | None = None
    words: memoryview = field(default_factory=idle_words)
    tags: dict[tuple[str, int], int] = field(default_factory=dict)


class Engine:
    """Admits records, runs them by the policy's priority, fires timers, stops failed pipelines."""

    def __init__(
        self,
        plan: WorkerPlan,
        scheduler: Scheduler[SchedKey, Unit],
        transport: EngineTransport,
        *,
        counters: WorkerCounters,
        read_clock: IdleClock,
        progress_interval: float,
        idle_timeout: float | None,
        hooks: RunHooks | None = None,
    ) -> None:
        hooks = hooks if hooks is not None else RunHooks()
        self.plan = plan
        self.scheduler = scheduler
        self.policy: SchedulingPolicy = scheduler.policy
        self.counters = counters
        self.read_clock = read_clock
        self._transport = transport
        self._now = transport.now
        #: Unfinished records per input partition: what may be committed (:mod:`.inflight`).
        self.inflight = InFlight()
        #: Pipelines stopped by a failed step (``on_error="stop"``), with what stopped them.
        self.stopped: dict[str, PipelineStoppedError] = {}
        #: Per input topic, how many stopped sub-topologies read it: a record of such a topic is held
        #: (never committable), and the transport keeps its partitions paused.
        self.held: dict[str, int] = {}
        #: Per topic, each reading task's decode method and schedule; a stopped pipeline's leave it.
        self.stages: dict[str, tuple[tuple[Decode, TaskSchedule], ...]] = dict(plan.stages)
        self.schedules: Sequence[TaskSchedule] = plan.schedules
        self.processors = any(task.processors for task in plan.tasks)
        #: The lessees of the steps declared with ``parallel=`` (``None``: no such step, and the run
        #: stage is exactly the plain one).
        self.lessees = plan.lessees
        if self.lessees is not None:
            self.lessees.queued = self.queued  # what an "auto" step on the lessor has behind it
            self.lessees.start()  # the warm pool and the fixed lessees, before the first record
        self.progress = ProgressSender(
            [(op, task.subtopology.input_topic) for task in plan.tasks for op in task.keyed],
            counters,
            interval=progress_interval,
            idle_timeout=idle_timeout,
            waiting=transport.waiting,
            held=self.held,
        )
        self.executor = Executor(
            scheduler,
            self.policy,
            plan.schedules,
            self.stop_pipeline,
            output=transport.output,
            emitter=hooks.emitter,
            record=hooks.record,
            after_quantum=self._after_quantum(),
            words=hooks.words,
            tags=hooks.tags,
            read_clock=read_clock,
        )

    def _after_quantum(self) -> Callable[[], None] | None:
        """What runs after each quantum: progress records (if any key_by sends them) and the
        lessees' pump (if any step has lessees); nothing at all for a plain plan."""
        progress = self.send_due_progress if self.progress.keyed else None
        if self.lessees is None:
            return progress
        pump = self.pump_lessees
        if progress is None:
            return pump

        def both() -> None:
            progress()
            pump()

        return both

    # -- what it runs ---------------------------------------------------------------------------------

    def tasks_of(self, topic: str) -> tuple[Task, ...]:
        return self.plan.routes.get(topic, ())

    def stateful(self, topic: str, partition: int) -> list[tuple[StatefulStep, int]]:
        """The stateful steps that one input partition feeds, each at its partition."""
        return [(window, partition) for task in self.tasks_of(topic) for window in task.windows]

    def queued(self, topic: str, partition: int) -> int:
        """Units of one input partition queued, over the sub-topologies reading it."""
        buffered = self.scheduler.buffered
        return sum(buffered(s.key(partition)) for _, s in self.stages.get(topic, ()))

    # -- admission ------------------------------------------------------------------------------------

    def admit(self, messages: Sequence[Message]) -> None:
        """Decode each record for each sub-topology reading its topic and queue the units.

        The units are queued when the whole batch is decoded, a run at a time (see
        :mod:`cadenza.worker.engine.admission`), also when a decode raises.
        """
        now = self._now()
        enqueued = time.perf_counter()
        read_at = self.read_clock.now()
        trace_bits = trace_id_bits()
        last_key: tuple[str, int] | None = None
        batch: PartitionBatch | None = None
        partitions: dict[tuple[str, int], PartitionBatch] = {}
        units = 0
        # Decoding and context stamping run user code too (codecs, policies): the crash slot says
        # "running, unknown" meanwhile (once per batch, not per record), so a death here pins nothing
        # and the Kafka marks' range rule decides.
        words = self.executor.words
        words[1] = UNKNOWN
        words[0] = 0
        try:
            for message in messages:
                if message.error() is not None and not self._usable(message):
                    continue
                topic = message.topic()
                partition = message.partition()
                offset = message.offset()
                if topic is None or partition is None or offset is None:
                    continue
                if batch is None or last_key is None or last_key[0] != topic or last_key[1] != partition:
                    last_key = (topic, partition)
                    batch = partitions.get(last_key)
                    if batch is None:
                        batch = partitions[last_key] = self._partition_batch(topic, partition, offset)
                # A stopped pipeline's share of the record never runs, so the record never completes:
                # it stays uncommitted for the restart that resumes the pipeline.
                run = batch.run
                pending: Pending = [offset, batch.holds] if run is None else run
                before = pending[1]
                for stage in batch.stages:
                    unit = stage.decode(message, topic, partition, offset)
                    if unit is None:
                        continue  # dead-lettered: done as far as the commit is concerned
                    stamp = message.timestamp()[1]
                    if stamp == stage.stamp and message.headers() is None:
                        ctx = stage.shared
                        unit.trace_id = trace_bits(64)
                        stage.hits += 1
                    else:
                        ctx = self._admit_context(stage, unit, message, now, stamp)
                    unit.ctx = ctx
                    unit.pending = pending
                    unit.enqueued = enqueued
                    unit.read_at = read_at
                    pending[1] += 1
                    if ctx is stage.ctx:
                        stage.units.append(unit)
                    else:
                        stage.ctx = ctx
                        stage.units = [unit]
                        stage.segments.append((ctx, stage.units))  # type: ignore[arg-type]
                progress = batch.progress  # InFlight.admitted, inlined: once per record
                progress.fetched = offset + 1
                if run is None:
                    if pending[1] > 0:
                        progress.queue.append(pending)
                elif pending[1] > before:  # dead-lettered records are done: not in the run
                    run.append(offset)
                units += pending[1] - before
        finally:
            scheduler = self.scheduler
            for batch in partitions.values():
                for stage in batch.stages:
                    stage.queue(scheduler)
        words[0] = IDLE
        counters = self.counters
        counters.consumed += len(messages)
        counters.units += units
        size = len(self.scheduler)
        counters.peak_buffered = max(counters.peak_buffered, size)

    def _usable(self, message: Message) -> bool:
        try:
            return raise_for_message_error(message)
        except KafkaClientError as exc:
            if exc.retriable:
                self._transport.transient(exc)
                return False
            raise

    def _partition_batch(self, topic: str, partition: int, offset: int) -> PartitionBatch:
        """What admitting the batch's records of one partition needs, made at its first record."""
        progress = self.inflight.progress(topic, partition)
        held = self.held
        holds = held.get(topic, 0) if held else 0
        topic_stages = self.stages.get(topic, ())
        # One sub-topology reads the topic and none is stopped: each record is one unit, and the
        # units of one operator-partition run in offset order, so the partition's records in this
        # batch share one pending entry (see cadenza.worker.engine.inflight). Not when the task has
        # a parallel step: its records then finish when their calls are released, and a record
        # dropped before the step would finish ahead of one still at a lessee.
        run: Pending | None = None
        if holds == 0 and len(topic_stages) == 1 and not topic_stages[0][1].task.parallel:
            run = [offset, 0]
            progress.queue.append(run)  # if no record gets a unit, it is done at once
        stages = tuple(StageBatch(decode, schedule, partition) for decode, schedule in topic_stages)
        return PartitionBatch(progress, holds, stages, run)

    @staticmethod
    def _admit_context(
        stage: StageBatch, unit: Unit, message: Message, now: float, stamp: int
    ) -> SchedulingContext:
        """A unit's context the long way (see :meth:`TaskSchedule.context`); counts and times it."""
        schedule = stage.schedule
        ctx = schedule.context(unit, message, now)
        origin = unit.origin
        if origin is None or unit.value is not None or not is_progress(origin):
            schedule.metrics.consumed += 1
            # stage: fetch, or the repartition hop (LatencyHistogram.observe, inlined: once per record)
            waited: float | None = now - stamp / 1000.0 if stamp > 0 else None
            if waited is not None and 0.0 <= waited < _INF:
                histogram = schedule.arrival
                histogram.counts[bisect_left(histogram.bounds, waited)] += 1
                histogram.sum += waited
            else:
                waited = None
            if stage.shares and message.headers() is None:
                stage.remember(stamp, ctx, waited)
        return ctx

    def run_alone(self, message: Message, topic: str, partition: int, offset: int) -> None:
        """Decode and run one record now, outside the scheduler: a record that may have killed a
        worker runs alone, so that a second death pins exactly it (:mod:`.quarantine`)."""
        pending = [offset, self.held.get(topic, 0) if self.held else 0]
        now = self._now()
        counters = self.counters
        for decode, schedule in self.stages.get(topic, ()):
            unit = decode(message, topic, partition, offset)
            if unit is None:
                continue
            unit.ctx = schedule.context(unit, message, now)
            unit.pending = pending  # a parallel step's call holds it until released
            metrics = schedule.metrics
            metrics.consumed += 1
            started = time.perf_counter()
            try:
                schedule.run(unit, unit.key, unit.value, unit.event_time, None)
            except PipelineStoppedError as stopped:
                self.stop_pipeline(stopped)
                pending[1] += 1  # the record stays uncommitted, as in the scheduled path
                continue
            metrics.record_run(0.0, time.perf_counter() - started)
            counters.units += 1
        counters.consumed += 1
        inflight = self.inflight
        inflight.admitted(inflight.progress(topic, partition), offset, pending)

    def dead_letter_alone(self, message: Message, topic: str, partition: int, offset: int, why: str) -> None:
        """Dead-letter one record without running it, for every sub-topology reading its topic; it
        counts as done (its dead letters are acknowledged before its offset is committed)."""
        for task in self.tasks_of(topic):
            dead = task.decoder.dead
            dead.quarantined(message, topic, partition, offset, node_id=task.subtopology.entry, why=why)
        inflight = self.inflight
        inflight.admitted(inflight.progress(topic, partition), offset, [offset, 0])

    # -- running --------------------------------------------------------------------------------------

    def run_for(self, seconds: float) -> int:
        """Run quanta, best priority first, until the buffer is empty, ``seconds`` have passed or the
        producer pushes back (see :mod:`cadenza.worker.engine.executor`); returns the records run,
        calls released by parallel steps included.

        With lessees, what they finished is released before and after, and a lessor left with
        nothing queued runs queued calls of process steps itself for a short slice (Dirigo's
        lessor works too; on two cores it is the second core of a CPU-bound step)."""
        hub = self.lessees
        if hub is None:
            return self.executor.run_for(seconds)
        released = hub.releases
        self.pump_lessees()
        ran = self.executor.run_for(seconds)
        if not len(self.scheduler) and hub.held:
            ran += self._help()
        self.pump_lessees()
        # A release finishes its record: it counts as run, so that a checkpoint follows it even in a
        # round that ran nothing else (the last calls of a burst come back after its records ran).
        return ran + hub.releases - released

    def _help(self) -> int:
        hub = self.lessees
        assert hub is not None
        while True:
            try:
                return hub.help()
            except PipelineStoppedError as stopped:
                self.executor.words[0] = IDLE
                self.stop_pipeline(stopped)

    def pump_lessees(self) -> None:
        """Take in what the lessees finished and release it downstream, in order (see
        :mod:`cadenza.worker.engine.lessees`); a release that stops its pipeline stops it here."""
        hub = self.lessees
        if hub is None:
            return
        while True:
            try:
                hub.pump()
                return
            except PipelineStoppedError as stopped:
                self.executor.words[0] = IDLE
                self.stop_pipeline(stopped)

    @property
    def lessee_held(self) -> int:
        """Records' calls held by parallel steps (queued, at a lessee or waiting for their turn)."""
        hub = self.lessees
        return 0 if hub is None else hub.held

    def wait_for_lessees(self, timeout: float) -> None:
        """Nothing to fetch or run: wait up to ``timeout`` for a lessee's answer."""
        hub = self.lessees
        if hub is not None and hub.held:
            hub.wait(timeout)

    def fire_wall_clock_timers(self) -> int:
        """Run the process steps' wall-clock timers now due; returns how many fired."""
        fired = 0
        stopped = self.stopped
        for schedule in self.schedules:
            if schedule.pipeline in stopped:
                continue
            for step in schedule.task.processors:
                try:
                    fired += step.fire_wall_clock_timers()
                except PipelineStoppedError as failure:
                    self.stop_pipeline(failure)
        return fired

    def send_due_progress(self) -> None:
        """After each quantum: progress records, if due (see
        :func:`~cadenza.worker.engine.operators.routing.progress_due`).

        Above all when a key_by was just handed a record that moves its input partition past the
        next window close downstream: a window at a repartition partition that gets no records from
        that input partition closes only once this news arrives. Sent from the loop alone, it waited
        for the rest of the run slice (under cameo, the bulk tenant's quanta that follow the urgent
        one: tens of ms on a loaded machine) and the next fetch. The quantum's records are produced
        by then, so the progress records still follow them."""
        now = time.monotonic()
        if self.progress.due(now):
            self.progress.send(now)

    def stop_pipeline(self, stopped: PipelineStoppedError) -> list[TaskSchedule]:
        """Stop running one pipeline, at the record that failed; the others keep running. Returns the
        schedules stopped (none if it was stopped already); the transport is told
        (:attr:`EngineTransport.stopped`), to hold their input.

        Its queued units are dropped without being counted as done, and records admitted later are
        held the same way, so the failed record and everything after it stay uncommitted."""
        name = stopped.pipeline
        if name in self.stopped:
            return []
        self.stopped[name] = stopped
        self.counters.pipelines_stopped += 1
        for op in self._parallel_ops():
            if op.pipeline == name:
                op.forget()  # its held calls stay uncommitted, like its queued units
        mine = [schedule for schedule in self.schedules if schedule.pipeline == name]
        indexes = {schedule.index for schedule in mine}
        queued = [key for key in self.scheduler.keys() if key[0] in indexes]  # noqa: SIM118 - a list, not a dict
        dropped = sum(self.scheduler.discard(key) for key in queued)
        for schedule in mine:
            topic = schedule.task.subtopology.input_topic
            self.held[topic] = self.held.get(topic, 0) + 1
            self.stages[topic] = tuple(pair for pair in self.stages[topic] if pair[1] is not schedule)
        self._transport.stopped(stopped, mine, dropped)
        return mine

    # -- ownership ------------------------------------------------------------------------------------

    def forget(self, partitions: Iterable[tuple[str, int]]) -> int:
        """Drop what the engine holds of partitions that went; returns the queued records dropped.

        Their queued records are run again by the next owner, from the last committed offset."""
        gone = list(partitions)
        dropped = 0
        discard = self.scheduler.discard
        for schedule in self.schedules:
            topic = schedule.task.subtopology.input_topic
            for gone_topic, partition in gone:
                if gone_topic == topic:
                    dropped += discard(schedule.key(partition))
        for topic, partition in gone:
            for window, part in self.stateful(topic, partition):
                window.drop(part)
        went = set(gone)
        for op in self._parallel_ops():
            op.forget(went)
        return dropped

    def _parallel_ops(self) -> list[ParallelOp]:
        """The parallel steps, each once (one after a join is in both of the join's tasks)."""
        return list(dict.fromkeys(op for task in self.plan.tasks for op in task.parallel))

    def close(self) -> None:
        """Release the operators' state stores, and the crash slot's words (a mapping cannot be
        closed while a view of it is held)."""
        self.executor.words, self.executor.tags = idle_words(), {}
        if self.lessees is not None:
            self.lessees.close()
        for task in self.plan.tasks:
            task.close()
