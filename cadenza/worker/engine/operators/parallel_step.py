"""A map, filter or flat_map declared with ``parallel=``: its calls run on lessees, in priority order,
and its outputs leave in offset order per input partition. A window aggregate declared with
``parallel=`` is one too, in front of its window: its call is the record's lift (its one-record
accumulator, :class:`~cadenza.operators.Lift`), which the window merges (see
:mod:`cadenza.operators.lift`).

The operator keeps one *lane* per input partition: the calls of that partition in the order their
records arrived (offset order, as the scheduler runs one operator-partition). A call's outcome may
come back from a lessee before the calls ahead of it; it is released (passed downstream, or
dead-lettered) only once every call ahead of it in its lane is. So a window after the step sees the
same records in the same order as without lessees, and its watermark (the barrier of Dirigo's
critical messages) never passes a record still at a lessee.

A call holds its record's in-flight entry (one more unit not yet run), so the record's offset is
not committable until the call is released: a checkpoint commits only done prefixes. With nothing
leased and nothing waiting in its lane, a process step's call runs at once on the lessor, as a plain
step would (``parallel="auto"`` before its first lease).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from cadenza.operators import Lifted, LiftFailure, Window
from cadenza.worker.engine.dead_letter import DeadLetters
from cadenza.worker.engine.lessees.calls import FILTER, KINDS, LIFT, MAP
from cadenza.worker.engine.lessees.leased_step import Call
from cadenza.worker.engine.operators.base import Operator
from cadenza.worker.engine.unit import Unit

if TYPE_CHECKING:
    from cadenza.pipelines.parallel import ParallelSpec
    from cadenza.worker.engine.idle_clock import IdleClock
    from cadenza.worker.engine.lessees.hub import LesseeHub

__all__ = ["ParallelOp", "ProgressHold"]

Lane = deque[Call]


class ParallelOp(Operator):
    """A stateless step whose calls run on lessees; see the module docstring."""

    __slots__ = ("dead", "hold", "kind", "lanes", "next", "pipeline", "read_clock", "step")

    def __init__(
        self,
        node_id: str,
        kind: str,
        fn: Callable[[Any], Any],
        next: Operator,
        dead: DeadLetters,
        *,
        hub: LesseeHub,
        spec: ParallelSpec,
        tenant: str,
        pipeline: str,
        read_clock: IdleClock | None = None,
    ) -> None:
        super().__init__(node_id)
        self.kind = KINDS[kind]
        self.next = next
        self.dead = dead
        self.pipeline = pipeline
        self.read_clock = read_clock
        #: ``(input topic, partition)`` -> its calls not yet released, in arrival order.
        self.lanes: dict[tuple[str, int], Lane] = {}
        #: The task's progress records waiting for calls ahead of them (a repartition reader's).
        self.hold: ProgressHold | None = None
        self.step = hub.step(
            tenant=tenant,
            pipeline=pipeline,
            node_id=node_id,
            kind=self.kind,
            fn=fn,
            spec=spec,
            release=self.release,
        )

    def process(self, unit: Unit, key: Any, value: Any, event_time: float, window: Window | None) -> None:
        where = (unit.topic, unit.partition)
        lane = self.lanes.get(where)
        step = self.step
        if not lane and step.runs_inline:
            ok, result = step.run_inline(unit, value)
            self._emit(unit, key, value, event_time, window, ok, result)
            return
        if lane is None:
            lane = self.lanes[where] = deque()
        call = Call(unit, key, value, event_time, window, lane)
        lane.append(call)
        pending = unit.pending
        if pending is not None:
            pending[1] += 1  # the record is not done until this call is released
        step.accept(call)

    def release(self, lane: Lane) -> None:
        """Pass on the lane's done calls from its head, in order; stop at the first not done.

        A call leaves the lane only after its outcome went downstream: if that raises (a later step
        stops the pipeline), the call stays, and its record stays uncommitted."""
        step = self.step
        clock = self.read_clock
        hold = self.hold
        while lane and lane[0].done:
            call = lane[0]
            unit = call.unit
            if hold is not None and not hold.lets(unit):
                return  # a progress record before it waits for other calls; released after it
            if clock is not None:
                clock.at = unit.read_at
            try:
                self._emit(unit, call.key, call.value, call.event_time, call.window, call.ok, call.result)
            finally:
                if clock is not None:
                    clock.at = None
            lane.popleft()
            step.released()
            pending = unit.pending
            if pending is not None:
                pending[1] -= 1
            if hold is not None:
                hold.settle((unit.topic, unit.partition))

    def _emit(  # noqa: PLR0917 - the operator's calling convention, plus the outcome
        self,
        unit: Unit,
        key: Any,
        value: Any,
        event_time: float,
        window: Window | None,
        ok: bool,
        result: Any,
    ) -> None:
        kind = self.kind
        if kind == LIFT:  # the window merges the partial, or dead-letters the failure where it would
            started = time.perf_counter()
            self.next.process(
                unit, key, Lifted(value, result if ok else LiftFailure(result)), event_time, window
            )
            self.step.stats.merge_seconds += time.perf_counter() - started
            return
        if not ok:
            self.dead.function_failed(unit, self.node_id, result)
            return
        if kind == MAP:
            self.next.process(unit, key, result, event_time, window)
        elif kind == FILTER:
            if result:
                self.next.process(unit, key, value, event_time, window)
        else:
            following = self.next
            for out in result:
                following.process(unit, key, out, event_time, window)

    def forget(self, partitions: set[tuple[str, int]] | None = None) -> None:
        """Drop the calls of ``partitions`` (every partition: ``None``); nothing is released for them."""
        lanes = self.lanes
        for where in list(lanes) if partitions is None else [p for p in partitions if p in lanes]:
            lane = lanes.pop(where)
            self.step.drop(list(lane))
            lane.clear()  # a release already due for it finds nothing to pass on
        if self.hold is not None:
            self.hold.forget(partitions)


class ProgressHold:
    """The progress records of a repartition reader's task that wait for calls ahead of them.

    A progress record tells the windows how far an upstream partition got; in offset order with the
    records, it must reach them after every record before it and before every record after it. The
    records may be at lessees, in the lanes of any parallel step of the task (in a chain, a record
    released by one step is at once in the next one's lane). So a progress record waits while some
    lane of its partition holds a call of an earlier record, and a lane releases no call of a later
    record while a progress record before it waits. Each waiting record keeps its offset uncommitted.
    """

    __slots__ = ("ops", "waiting")

    def __init__(self, ops: list[ParallelOp]) -> None:
        self.ops = ops
        for op in ops:
            op.hold = self
        #: ``(topic, partition)`` -> ``(offset, unit, deliver)`` of each waiting progress record.
        self.waiting: dict[tuple[str, int], deque[tuple[int, Unit, Callable[[], None]]]] = {}

    def busy(self, unit: Unit) -> bool:
        """Whether progress record ``unit`` must wait: an earlier record's call is still held."""
        where = (unit.topic, unit.partition)
        return bool(self.waiting.get(where)) or self._ahead(where, unit.offset)

    def defer(self, unit: Unit, deliver: Callable[[], None]) -> None:
        self.waiting.setdefault((unit.topic, unit.partition), deque()).append((unit.offset, unit, deliver))
        pending = unit.pending
        if pending is not None:
            pending[1] += 1

    def lets(self, unit: Unit) -> bool:
        """Whether a call of ``unit`` may be released: no progress record before it waits."""
        waiting = self.waiting.get((unit.topic, unit.partition))
        return not waiting or waiting[0][0] > unit.offset

    def settle(self, where: tuple[str, int]) -> None:
        """Deliver the waiting progress records nothing is ahead of any more; then release the calls
        that waited behind them."""
        waiting = self.waiting.get(where)
        delivered = False
        while waiting and not self._ahead(where, waiting[0][0]):
            _, unit, deliver = waiting[0]
            deliver()
            waiting.popleft()
            pending = unit.pending
            if pending is not None:
                pending[1] -= 1
            delivered = True
        if delivered:
            for op in self.ops:
                lane = op.lanes.get(where)
                if lane:
                    op.release(lane)

    def _ahead(self, where: tuple[str, int], offset: int) -> bool:
        for op in self.ops:
            lane = op.lanes.get(where)
            if lane and lane[0].unit.offset < offset:
                return True
        return False

    def forget(self, partitions: set[tuple[str, int]] | None = None) -> None:
        """Drop waiting progress records (their partition went, their pipeline stopped)."""
        if partitions is None:
            self.waiting.clear()
        else:
            for where in partitions:
                self.waiting.pop(where, None)
