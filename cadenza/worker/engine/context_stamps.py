"""Scheduling contexts for the worker's sub-topologies: built at admission, stamped on every output.

The scheduler's operator-partition is a sub-topology (:class:`~cadenza.worker.engine.task.Task`) on one input
partition: the steps of a sub-topology run as one fused chain, like Cameo's operators, because they
need no queue between them. So the "operator" the policies and the cost model see is the
sub-topology, named by its entry step, and ``C_path`` runs over the DAG of sub-topologies joined by
their repartition topics.

Where contexts come from:

- a record read from a source topic gets a fresh context from ``policy.build_ctx_at_source``, with
  the record's Kafka timestamp as its arrival (``t_F``) and the trace id of a valid ``cadenza-ctx`` it
  carries. Only a source declared ``trusted_context=True`` (the output of a Spark stage of the
  pipeline, say) keeps a context that names this pipeline and tenant; on any other source such a
  context is a producer choosing its own priority, and it is counted as rejected
  (``cadenza_context_headers_rejected_total``);
- a record read from a repartition topic carries the context its ``key_by`` stamped for this
  sub-topology (``policy.build_ctx_at_operator``); one naming another pipeline or tenant is counted as
  rejected and replaced, and a missing or garbled one is counted and replaced
  by a fresh source context, and a garbled one (on any topic) is also copied to the dead-letter
  topic as a notice (:meth:`~cadenza.worker.engine.dead_letter.DeadLetters.context_garbled`);
- a sink stamps a context on each result for whoever reads the sink topic next.

For a windowed sub-topology the record's window close is passed to the policy (Cameo uses it as
``t_F``). The close of a window is its event-time end plus the allowed lateness plus the source's
bound on out-of-orderness: the earliest moment the watermark lets the final result out, taking event
time as wall-clock time (which is what producer timestamps are). The same close is the ``t_F`` of
the window's result at the sink, so a window result's end-to-end latency is measured from when it
could first have been emitted.

A record is not only part of its own window: it also moves the watermark, and the first record of
an upstream partition past a window's close is the one that lets that window's result out. Its
urgency is that earlier window's, not its own (which may close a second later): deferring it would
hold back a result that is due now. :class:`WindowRelease` finds these records, per upstream
partition, with one comparison per record.

Records of one partition admitted together (one fetch) with the same arrival timestamp and window
close, and no ``cadenza-ctx`` header, get one shared context when the policy allows it
(``shares_source_contexts``, all built-ins): their contexts would be equal but for the trace id, and
the scheduler queues records sharing a context as one run. Each record keeps its own trace id on its
unit, and everything that reads a trace id per record (spans, outgoing contexts) reads it there.
"""

from __future__ import annotations

import math
import time
from bisect import bisect_left
from collections.abc import Callable
from copy import copy
from dataclasses import dataclass
from typing import Any

from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, Message

from cadenza.infra.kafka.headers import get_header
from cadenza.infra.metrics.emitter import SpanEmitter
from cadenza.infra.metrics.prometheus import OperatorMetrics
from cadenza.operators import Window
from cadenza.operators.window_assigners import HoppingWindows, TumblingWindows, WindowAssigner
from cadenza.pipelines import PipelineGraph
from cadenza.scheduling.context import (
    CONTEXT_HEADER,
    SchedulingContext,
    decode_context,
    encode_context,
    new_trace_id,
    pack_trace_id,
    retrace_parts,
)
from cadenza.scheduling.policy import OperatorInfo, SchedulingPolicy, SourceRecordInfo
from cadenza.worker.engine.operators.window_step import WindowOp
from cadenza.worker.engine.task import Task
from cadenza.worker.engine.unit import Unit
from cadenza.worker.engine.wire import is_progress

__all__ = [
    "KeyByStamper",
    "SinkStamper",
    "TaskSchedule",
    "WindowRelease",
    "WindowTiming",
    "close_function",
    "first_close_after",
    "window_delay",
]

_INF = math.inf

CloseTime = Callable[[float], float]

_ENCODED_CACHE_SIZE = 256


def window_delay(window_op: WindowOp) -> float:
    """How long after a window's end its result can first be emitted: lateness plus out-of-orderness."""
    return window_op.lateness + window_op.max_out_of_orderness


def close_function(assigner: WindowAssigner, delay: float) -> CloseTime:
    """``event time -> close`` for an assigner: the first window end after the time, plus ``delay``."""
    if isinstance(assigner, TumblingWindows | HoppingWindows):
        assign = assigner.assign

        def close_assigned(t: float) -> float:
            windows: list[Window] = assign(t)
            return (min(w.end for w in windows) if windows else t) + delay

        return close_assigned
    window_of = assigner.window_of

    def close_single(t: float) -> float:
        end: float = window_of(t).end
        return end + delay

    return close_single


@dataclass(frozen=True, slots=True)
class WindowTiming:
    """When a sub-topology's window results can first be emitted: known from the graph, before any
    operator is built (plan assembly hands it to the schedules and stamps that need it)."""

    #: ``event time -> close`` of the window the time falls in (see :func:`close_function`).
    close: CloseTime
    #: Lateness plus out-of-orderness (see :func:`window_delay`).
    delay: float

    def release(self) -> WindowRelease:
        """A fresh tracker (it keeps state per partition, so each user needs its own)."""
        return WindowRelease(self.close, self.delay)

    @classmethod
    def of(cls, window_op: WindowOp) -> WindowTiming:
        """The timing of a built window step (tests and benchmarks that hold one)."""
        delay = window_delay(window_op)
        return cls(close_function(window_op.assigner, delay), delay)

    def first_close_after(self) -> Callable[[float], float]:
        """``event time t -> the first close later than t``: the event time at which an input's
        watermark releases its next window (a key_by sends its progress early then)."""
        close, delay = self.close, self.delay

        def release(event_time: float) -> float:
            return close(event_time - delay)

        return release


def first_close_after(window_op: WindowOp) -> Callable[[float], float]:
    """``event time t -> the first close of ``window_op`` later than t`` (see
    :meth:`WindowTiming.first_close_after`)."""
    return WindowTiming.of(window_op).first_close_after()


class WindowRelease:
    """The window close a record's deadline counts from: its own window's, or an earlier one it releases.

    Per input partition it keeps the first close after the largest event time seen so far (the next
    window this partition's watermark will release). A record at or past that close moves the
    watermark over it, so it is given that close instead of its own window's. The watermark of a
    merged stream is the minimum over its upstream partitions, so counting per upstream partition
    finds the record that really releases the window (and the others that could, at most one per
    partition per window).
    """

    __slots__ = ("close", "delay", "pending")

    def __init__(self, close: CloseTime, delay: float) -> None:
        self.close = close
        #: Lateness plus out-of-orderness: a window whose end plus this is at most the largest event
        #: time seen has been released.
        self.delay = delay
        self.pending: dict[int, float] = {}

    @classmethod
    def of(cls, window_op: WindowOp) -> WindowRelease:
        """The tracker for records entering ``window_op``'s task."""
        delay = window_delay(window_op)
        return cls(close_function(window_op.assigner, delay), delay)

    def __call__(self, partition: int, event_time: float) -> float:
        pending = self.pending.get(partition)
        if pending is not None and event_time < pending:
            return self.close(event_time)
        # The first close after this record: the next window this partition will release.
        self.pending[partition] = self.close(event_time - self.delay)
        if pending is None:
            return self.close(event_time)
        return pending


class TaskSchedule:
    """What the worker needs to schedule one task: its identity, its deadline inputs and its metrics."""

    __slots__ = (
        "_fresh_info",
        "_keeps_info",
        "_same_pipeline",
        "_shared",
        "arrival",
        "from_source",
        "index",
        "keys",
        "latency_target",
        "metrics",
        "operator_id",
        "pipeline",
        "policy",
        "release",
        "run",
        "shares_source_contexts",
        "task",
        "tenant",
        "trusted",
        "window",
    )

    def __init__(
        self,
        index: int,
        task: Task,
        graph: PipelineGraph,
        policy: SchedulingPolicy,
        metrics: OperatorMetrics,
        *,
        window: WindowTiming | None = None,
    ) -> None:
        self.index = index
        self.task = task
        self.run = task.root.process
        self.pipeline = graph.name
        self.tenant = graph.tenant
        self.latency_target = graph.latency_target_s
        self.operator_id = task.subtopology.entry
        self.from_source = task.subtopology.input_kind == "source"
        #: A source declared to carry this pipeline's own contexts (see the module docstring).
        self.trusted = self.from_source and bool(
            graph.node(task.subtopology.entry).parameters.get("trusted_context", False)
        )
        self.policy = policy
        self.metrics = metrics
        #: When the task's (first) window's results are due, if it is windowed.
        self.window = window
        #: Where the time from a fetched record's Kafka timestamp to its admission is observed: the
        #: fetch stage for a source topic, the repartition hop for a repartition topic.
        self.arrival = metrics.fetch_latency if self.from_source else metrics.repartition_hop
        #: For a windowed task read from a source topic: the close each record's deadline counts from
        #: (records from a repartition topic had it stamped by their key_by, see :class:`KeyByStamper`).
        self.release: WindowRelease | None = (
            window.release() if window is not None and self.from_source else None
        )
        #: Scheduler keys per input partition, made once (a tuple per record would be made per record).
        self.keys: dict[int, tuple[int, int]] = {}
        self._fresh_info = SourceRecordInfo(self.pipeline, self.tenant, self.latency_target, 0.0, 0, 0)
        self._fresh_info.operator_id = self.operator_id
        self._same_pipeline = OperatorInfo(self.pipeline, self.operator_id, self.window is not None)
        #: Whether records read from the source without headers may share contexts (see :meth:`context`).
        self.shares_source_contexts = self.from_source and policy.shares_source_contexts
        #: Whether the policy keeps the info objects its hooks get: then each call gets its own.
        self._keeps_info = policy.keeps_hook_info
        #: Per input partition, the last fresh context made: ``(admission time, arrival, window close,
        #: context)``; a record with the same three gets the same context.
        self._shared: dict[int, tuple[float, float, float | None, SchedulingContext]] = {}

    def key(self, partition: int) -> tuple[int, int]:
        key = self.keys.get(partition)
        if key is None:
            key = self.keys[partition] = (self.index, partition)
        return key

    def context(self, unit: Unit, message: Message, now: float) -> SchedulingContext:
        """The context of a unit entering this task (see the module docstring); sets its trace id.

        ``now`` is the admission time, one per fetched batch: a shared context never outlives the
        batch, so it holds the same path cost estimate a context of its own would.
        """
        headers = message.headers()
        if headers is None and self.shares_source_contexts:
            kind, millis = message.timestamp()  # _arrival, inlined: once per record
            arrival = millis / 1000.0
            if kind == TIMESTAMP_NOT_AVAILABLE or not 0.0 < arrival < now:
                arrival = now
            partition = unit.partition
            release = self.release
            close = None if release is None else release(partition, unit.event_time)
            shared = self._shared.get(partition)
            if shared is not None and shared[0] == now and shared[1] == arrival and shared[2] == close:
                unit.trace_id = new_trace_id()
                return shared[3]
            ctx = self._fresh(unit, arrival, close, None)
            self._shared[partition] = (now, arrival, close, ctx)
            unit.trace_id = ctx.trace_id
            return ctx
        ctx = self._context(unit, message, headers, now)
        unit.trace_id = ctx.trace_id
        return ctx

    def _context(self, unit: Unit, message: Message, headers: Any, now: float) -> SchedulingContext:
        raw = get_header(headers, CONTEXT_HEADER)
        trace_id = None
        if raw is not None:
            ctx = decode_context(raw)
            if ctx is None:
                # Still run the record (its value is fine), with a fresh context; and leave a notice
                # in the dead-letter topic so whoever wrote the garbage can be found.
                self.metrics.context_garbled += 1
                self.task.decoder.dead.context_garbled(message, unit, self.operator_id, raw)
            elif ctx.pipeline_id != self.pipeline or ctx.tenant_id != self.tenant:
                # Another pipeline's result (a sink of it is this source): new deadline, same trace.
                # Anything else claiming another pipeline or tenant than this one is not believed.
                if not self.from_source or ctx.pipeline_id == self.pipeline:
                    self.metrics.context_rejected += 1
                trace_id = ctx.trace_id
            elif not self.from_source:
                return ctx  # stamped for this task by the key_by upstream
            elif self.trusted:
                # Written by an earlier stage of this pipeline outside the worker (a Spark stage):
                # keep its frontier and target, and add this task's path cost and window close.
                stage = copy(self._same_pipeline) if self._keeps_info else self._same_pipeline
                release = self.release
                stage.window_close_time = (
                    None if release is None else release(unit.partition, unit.event_time)
                )
                return self.policy.build_ctx_at_operator(ctx, stage, None)
            else:
                # This pipeline's context on a source nobody declared trusted: a producer choosing its
                # own priority (t_F = 0, L = 0 would jump every queue). Fresh deadline, same trace.
                self.metrics.context_rejected += 1
                trace_id = ctx.trace_id
        elif not self.from_source and not is_progress(unit.origin):  # progress records carry none
            self.metrics.context_missing += 1
        release = self.release
        close = None if release is None else release(unit.partition, unit.event_time)
        return self._fresh(unit, _arrival(message, now), close, trace_id)

    def _fresh(
        self, unit: Unit, arrival: float, close: float | None, trace_id: int | None
    ) -> SchedulingContext:
        """A new source context for ``unit`` (arriving at ``arrival``, its window closing at ``close``)."""
        info = copy(self._fresh_info) if self._keeps_info else self._fresh_info
        info.arrival_time = arrival
        info.offset = unit.offset
        info.partition = unit.partition
        info.trace_id = trace_id
        info.window_close_time = close
        return self.policy.build_ctx_at_source(info)


def _arrival(message: Message, now: float) -> float:
    """When a record arrived: its Kafka timestamp, unless absent or not before ``now`` (a producer's
    clock ahead of ours), then ``now``, the admission time."""
    kind, millis = message.timestamp()
    if kind != TIMESTAMP_NOT_AVAILABLE:
        stamped = millis / 1000.0
        if 0.0 < stamped < now:
            return stamped
    return now


class KeyByStamper:
    """Stamps the context a ``key_by`` output needs at the sub-topology that reads its topic
    (``pipeline``, entered at ``operator_id``, windowed as ``window`` says).

    The window close is found here, upstream, where the record's partition is the one the downstream
    watermark is kept per (see :class:`WindowRelease`).
    """

    __slots__ = ("build", "keeps_info", "release", "target")

    def __init__(
        self, policy: SchedulingPolicy, pipeline: str, operator_id: str, window: WindowTiming | None
    ) -> None:
        self.build = policy.build_ctx_at_operator
        self.target = OperatorInfo(pipeline, operator_id, window is not None)
        self.keeps_info = policy.keeps_hook_info
        self.release = None if window is None else window.release()

    def __call__(self, ctx: SchedulingContext, unit: Unit, event_time: float, value: object) -> bytes:
        target = copy(self.target) if self.keeps_info else self.target
        release = self.release
        if release is not None:
            target.window_close_time = release(unit.partition, event_time)
        out = self.build(ctx, target, value)
        out.trace_id = unit.trace_id  # the record's own, not that of the run its context was made for
        return encode_context(out)


class SinkStamper:
    """At a sink: the result's end-to-end latency and deadline, and the context it carries onwards.

    The outgoing context is made here directly rather than by ``policy.build_ctx_at_operator``: the
    reader of a sink topic is outside this pipeline, so there is no receiving operator to cost, and
    the worker reading it builds its own context for its pipeline anyway (keeping the trace id).
    """

    __slots__ = (
        "_after",
        "_before",
        "_ctx",
        "_encoded",
        "_frontier",
        "delay",
        "emitter",
        "latency_target",
        "metrics",
    )

    def __init__(
        self,
        *,
        latency_target: float,
        delay: float | None,
        metrics: OperatorMetrics,
        emitter: SpanEmitter | None,
    ) -> None:
        self.latency_target = latency_target
        #: For a sink after a window: how long after a window's end its result can first be emitted.
        self.delay = delay
        self.metrics = metrics
        self.emitter = emitter
        #: Header bytes before and after the trace id, by ``(id(context in), frontier)``, with the
        #: context kept alive so its id is not reused: the next result of the same run differs only
        #: by its trace id (see :func:`~cadenza.scheduling.context.retrace_parts`). Quanta of
        #: several partitions interleave, so one entry would not do; it is cleared when full.
        self._encoded: dict[tuple[int, float], tuple[SchedulingContext, bytes, bytes]] = {}
        #: The entry used last, checked first (by identity, no key to build): a quantum's results
        #: come from one run or a few.
        self._ctx: SchedulingContext | None = None
        self._frontier = math.nan
        self._before = b""
        self._after = b""

    def __call__(self, unit: Unit, window: Window | None, value: object) -> bytes | None:
        ctx = unit.ctx
        if ctx is None:  # run outside the scheduler (tests of single operators)
            return None
        now = time.time()
        delay = self.delay
        frontier = ctx.frontier_time
        if window is not None and delay is not None:
            frontier = window.end + delay
        latency = now - frontier
        target = self.latency_target
        metrics = self.metrics
        # OperatorMetrics.record_sink, inlined: once per result
        histogram = metrics.e2e_latency
        if 0.0 <= latency < _INF:
            histogram.counts[bisect_left(histogram.bounds, latency)] += 1
            histogram.sum += latency
        if latency <= target:
            metrics.deadlines_met += 1
        else:
            metrics.deadlines_missed += 1
        emitter = self.emitter
        trace_id = unit.trace_id
        if emitter is not None:
            tenant, pipeline, operator = self.metrics.labels
            emitter.emit(
                tenant,
                pipeline,
                operator,
                unit.partition,
                trace_id,
                0.0,
                0.0,
                frontier,
                target,
                now,
                sink=True,
            )
        if ctx is self._ctx and frontier == self._frontier:  # the common case: the same run
            return self._before + pack_trace_id(trace_id) + self._after
        cache_key = (id(ctx), frontier)
        known = self._encoded.get(cache_key)
        if known is None:
            raw = encode_context(
                SchedulingContext(
                    ctx.pipeline_id,
                    ctx.tenant_id,
                    frontier,
                    ctx.latency_target,
                    ctx.priority,
                    0.0,
                    ctx.hops + 1,
                    trace_id,
                )
            )
            encoded = self._encoded
            if len(encoded) >= _ENCODED_CACHE_SIZE:
                encoded.clear()
            before, after = retrace_parts(raw)
            known = encoded[cache_key] = (ctx, before, after)
        self._ctx, before, after = known
        self._frontier = frontier
        self._before = before
        self._after = after
        return before + pack_trace_id(trace_id) + after
