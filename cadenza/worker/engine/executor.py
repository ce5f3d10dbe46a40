"""The run stage: quanta taken by the scheduler's priority, each record run and measured.

:meth:`Executor.run_for` runs quanta (best priority first, see
:class:`~cadenza.scheduling.Scheduler`) until the buffer is empty or its time is up, and starts no
quantum while the producer pushes back (:attr:`~cadenza.worker.engine.output.Output.pressure`): the
quantum's outputs would have nowhere to go. Each record is timed; the measurement goes to the
operator's Prometheus histograms, sampled to the spans topic, and once per quantum to the policy as a
reply (so cost estimates learn at once). A record's run also counts it down in its in-flight entry
(:mod:`cadenza.worker.engine.inflight`), which is what lets a checkpoint commit past it.

A step of a pipeline declared ``on_error="stop"`` that fails raises
:class:`~cadenza.worker.engine.dead_letter.PipelineStoppedError`; the quantum is closed and the worker is
told (``on_stop``), and the other pipelines keep running.

Around each record the executor stores which record runs into the worker's crash slot
(:mod:`cadenza.worker.reliability.crash_slot`): one store before and one after, into a
memory-mapped word, so that
the worker's successor on this host knows the record a death interrupted without a flush per record.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Callable, Sequence
from typing import Protocol

from cadenza.infra.metrics.emitter import SpanEmitter
from cadenza.scheduling.policy import Measurement, SchedulingPolicy
from cadenza.scheduling.scheduler import Quantum, Scheduler
from cadenza.worker.engine.context_stamps import TaskSchedule
from cadenza.worker.engine.dead_letter import PipelineStoppedError
from cadenza.worker.engine.idle_clock import IdleClock
from cadenza.worker.engine.running import IDLE, UNKNOWN, idle_words
from cadenza.worker.engine.unit import Unit

__all__ = ["Executor", "SchedKey"]

#: The scheduler's operator-partition: (schedule index, input partition).
SchedKey = tuple[int, int]
#: ``(activity, wall start, wall end, detail)``: the activity trace's recorder.
Record = Callable[[str, float, float, str | None], None]
_NO_QUANTUM: tuple[float, SchedKey] = (0.0, (0, 0))


class Backpressure(Protocol):
    @property
    def pressure(self) -> bool: ...


class Executor:
    """Runs queued units of ``schedules``, taken by the scheduler's priority; built complete by the
    engine (:class:`~cadenza.worker.engine.engine.Engine`)."""

    __slots__ = (
        "after_quantum",
        "emitter",
        "on_stop",
        "output",
        "policy",
        "read_clock",
        "record",
        "scheduler",
        "schedules",
        "slowest",
        "tags",
        "words",
    )

    def __init__(
        self,
        scheduler: Scheduler[SchedKey, Unit],
        policy: SchedulingPolicy,
        schedules: Sequence[TaskSchedule],
        on_stop: Callable[[PipelineStoppedError], object],
        *,
        output: Backpressure | None = None,
        emitter: SpanEmitter | None = None,
        record: Record | None = None,
        after_quantum: Callable[[], None] | None = None,
        words: memoryview | None = None,
        tags: dict[tuple[str, int], int] | None = None,
        read_clock: IdleClock | None = None,
    ) -> None:
        self.scheduler = scheduler
        self.policy = policy
        #: Index ``i`` is the schedule of the scheduler keys ``(i, partition)``.
        self.schedules = schedules
        self.on_stop = on_stop
        self.output = output
        self.emitter = emitter
        self.record = record
        #: Called after each quantum (the engine's progress records, see
        #: :meth:`~cadenza.worker.engine.engine.Engine.send_due_progress`); ``None``: nothing.
        self.after_quantum = after_quantum
        #: The crash slot's words (``[0]``: the running offset, ``[1]``: its partition's tag) and the
        #: partitions' tags; a private buffer when the worker has no slot, so the hot path stores
        #: unconditionally.
        self.words = words if words is not None else idle_words()
        self.tags = tags if tags is not None else {}
        #: Reads each running unit's fetch stamp (``Unit.read_at``) while it runs: the worker's idle
        #: clock, which window steps time their inputs' silence on (see
        #: :mod:`cadenza.worker.engine.idle_clock`); a private one when nothing reads it.
        self.read_clock = read_clock if read_clock is not None else IdleClock()
        #: The slowest quantum of the last :meth:`run_for`: (seconds, its scheduler key).
        self.slowest: tuple[float, SchedKey] = _NO_QUANTUM

    def run_for(self, seconds: float) -> int:
        """Run quanta, best priority first, until the buffer is empty, ``seconds`` have passed or the
        producer pushes back; returns the records run."""
        scheduler = self.scheduler
        schedules = self.schedules
        output = self.output
        perf = time.perf_counter
        now = perf()
        until = now + seconds
        slowest = 0.0
        self.slowest = _NO_QUANTUM
        ran = 0
        while output is None or not output.pressure:
            quantum = scheduler.next_batch()
            if quantum is None:
                break
            try:
                ran += self.run_quantum(quantum, schedules[quantum.key[0]])
            except PipelineStoppedError as stopped:
                self.words[0] = IDLE  # the stopped record did not kill the worker
                quantum.close()
                self.on_stop(stopped)
            after = self.after_quantum
            if after is not None:
                after()
            started, now = now, perf()
            if now - started > slowest:  # a subtraction per quantum: what a stall's log line names
                slowest = now - started
                self.slowest = (slowest, quantum.key)
            if now >= until:
                break
        return ran

    def slowest_quantum(self) -> str | None:
        """The slowest quantum of the last :meth:`run_for` (with its bookkeeping), for a stall's log."""
        took, (index, partition) = self.slowest
        if took <= 0.0 or index >= len(self.schedules):
            return None
        schedule = self.schedules[index]
        return (
            f"slowest quantum: {schedule.pipeline}/{schedule.operator_id} partition {partition}, "
            f"{took * 1000.0:.0f} ms"
        )

    def run_quantum(self, quantum: Quantum[SchedKey, Unit], schedule: TaskSchedule) -> int:
        """Run one quantum's records, measuring each; one reply to the policy for the quantum.

        Each record's queue wait and run time go to the operator's histograms as it runs (their
        buckets); the histograms' sums and the processed count are added once for the quantum,
        also when a step stops the pipeline halfway through it.
        """
        run = schedule.run
        metrics = schedule.metrics
        queue_waits = metrics.queue_wait
        wait_counts = queue_waits.counts
        wait_bounds = queue_waits.bounds
        run_times = metrics.run_time
        run_counts = run_times.counts
        run_bounds = run_times.bounds
        policy = self.policy
        pipeline = schedule.pipeline
        operator = schedule.operator_id
        partition = quantum.key[1]
        emitter = self.emitter
        emit = None if emitter is None else emitter.emit
        tenant = schedule.tenant
        perf = time.perf_counter
        wall = time.time() - perf()  # wall-clock time of perf 0: one clock read per quantum
        quantum_start = perf()
        words = self.words
        idle = IDLE
        words[0] = idle  # the partition word changes only while no offset is shown
        words[1] = self.tags.get((schedule.task.subtopology.input_topic, partition), UNKNOWN)
        read_clock = self.read_clock
        ran = 0
        busy = 0.0
        waited = 0.0
        last = None
        try:
            for ctx, unit in quantum:
                words[0] = unit.offset
                read_clock.at = unit.read_at
                started = perf()
                run(unit, unit.key, unit.value, unit.event_time, None)
                finished = perf()
                words[0] = idle
                pending = unit.pending
                if pending is not None:
                    pending[1] -= 1
                run_time = finished - started
                queue_wait = started - unit.enqueued  # perf_counter times (0.0: never queued): finite, >= 0
                busy += run_time
                waited += queue_wait
                # OperatorMetrics.record_run, inlined: the buckets once per record
                wait_counts[bisect_left(wait_bounds, queue_wait)] += 1
                run_counts[bisect_left(run_bounds, run_time)] += 1
                if emit is not None:
                    emit(
                        tenant,
                        pipeline,
                        operator,
                        partition,
                        unit.trace_id,
                        queue_wait,
                        run_time,
                        ctx.frontier_time,
                        ctx.latency_target,
                        wall + finished,
                    )
                last = ctx
                ran += 1
        finally:
            read_clock.at = None
            metrics.processed += ran
            queue_waits.sum += waited
            run_times.sum += busy
        record = self.record
        if record is not None:
            record("processing", wall + quantum_start, wall + perf(), f"{pipeline}/{operator}")
        if last is not None:  # one reply per quantum: what its records cost, in total
            measured = Measurement(pipeline, operator, busy, waited / ran, wall + perf(), ran)
            policy.process_ctx_from_reply(policy.prepare_reply(last, measured))
        return ran
