"""The window aggregate step: keyed windows over event time, per input partition, changelogged.

Each input partition of the step is one operator-partition with its own
:class:`~cadenza.operators.WindowedAggregation` (state in a :class:`~cadenza.state.ChangelogView`
of the step's store) and its own :class:`~cadenza.operators.WatermarkTracker` (with the source's
``max_out_of_orderness``). Per record: add it (records that miss closed windows go to the late topic),
raise the watermark, emit what closed.

The tracker's inputs are where event time comes from, and all of them are known from the plan when
the partition is opened (``inputs``): read from a source partition, that is the one partition (0);
read from a repartition topic, it is every *upstream* partition that can write to it (named by the
record's origin header), whether or not it has delivered anything yet. Records of several source
partitions interleave in a repartition partition, and one source partition running ahead would
otherwise push the watermark past records the others have not delivered yet, making them late. So
the watermark is the minimum over all of them; one that stays silent for ``idle_timeout`` seconds
stops holding it back (counted in :attr:`WindowOp.idle_timeouts`, logged once per input). Upstream
partitions that send this partition no records still tell it how far they got, by progress records
(see :mod:`cadenza.worker.engine.wire`), which reach :meth:`WindowOp.progress` in offset order with the data.
The rule is written down in ``docs/concepts/watermarks.md``.

At the end of each batch the worker calls :meth:`WindowOp.changelog_writes`: the changed keys of each
partition touched, then its position (next input offset, largest event time). On assignment
:meth:`WindowOp.restore` loads that back; input below the restored position is skipped because the
state already holds it (see :mod:`cadenza.state.changelog`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Unpack

from cadenza.errors import ConfigError
from cadenza.infra.metrics.prometheus import LatencyHistogram
from cadenza.operators import (
    Aggregate,
    Aggregator,
    HoppingWindows,
    LiftedAggregator,
    SessionWindows,
    SlidingWindows,
    TumblingWindows,
    WatermarkTracker,
    Window,
    WindowedAggregation,
    WindowFailure,
    WindowResult,
)
from cadenza.pipelines import Hopping, Session, Sliding, Tumbling
from cadenza.pipelines.graph import NodeFunctions
from cadenza.state import ChangelogView, Position, encode_key
from cadenza.state.safe_codec import UnsupportedValueError, check
from cadenza.worker.engine.operators.stateful import StatefulArgs, StatefulOperator
from cadenza.worker.engine.unit import Unit
from cadenza.worker.engine.wire import result_event_time

__all__ = ["LiftedWindowOp", "WindowOp", "aggregator_of", "assigner_of"]


def assigner_of(
    spec: Tumbling | Hopping | Sliding | Session,
) -> TumblingWindows | HoppingWindows | SlidingWindows | SessionWindows:
    if isinstance(spec, Tumbling):
        return TumblingWindows(spec.size_s)
    if isinstance(spec, Hopping):
        return HoppingWindows(spec.size_s, spec.hop_s)
    if isinstance(spec, Sliding):
        return SlidingWindows(spec.size_s)
    return SessionWindows(spec.gap_s)


def aggregator_of(functions: NodeFunctions) -> Aggregate[Any, Any, Any]:
    if functions.init is None or functions.add is None:
        raise ValueError("a window aggregate needs init and add functions")
    return Aggregate(functions.init, functions.add, functions.merge, functions.result)


@dataclass(slots=True, eq=False)
class _Partition:
    """One operator-partition: its aggregation, watermark and restore position."""

    aggregation: WindowedAggregation[Any, Any, Any, Any]
    view: ChangelogView
    tracker: WatermarkTracker
    #: Largest event time per watermark input (upstream partition, or 0), for the changelog position.
    event_times: dict[int, float] = field(default_factory=dict)
    #: Input offsets below this are already in the restored state.
    skip_below: int = -1
    #: Next input offset to record in the changelog position; -1 until a record ran.
    next_offset: int = -1
    #: Results that closed while restoring, emitted with the partition's next record.
    pending: list[WindowResult] = field(default_factory=list)
    #: Windows whose result() raised while restoring, dead-lettered with the partition's next record.
    pending_failures: list[WindowFailure] = field(default_factory=list)
    #: Per upstream partition, the largest (offset, sequence) applied (repartitioned input only).
    origins: dict[int, tuple[int, int]] = field(default_factory=dict)
    #: The unit whose values are being applied: a unit fanned out upstream (flat_map) brings several.
    current: Unit | None = None


class WindowOp(StatefulOperator):
    __slots__ = ("aggregator", "assigner", "close_wait", "closed_end", "inputs", "lateness")

    def __init__(
        self,
        node_id: str,
        spec: Tumbling | Hopping | Sliding | Session,
        functions: NodeFunctions,
        *,
        allowed_lateness: float,
        inputs: tuple[int, ...] | None = (0,),
        close_wait: LatencyHistogram | None = None,
        **common: Unpack[StatefulArgs],
    ) -> None:
        super().__init__(node_id, **common)
        #: The watermark inputs of every partition, from the plan: (0,) for a source topic, the
        #: upstream partitions for a repartition topic; ``None``: unknown, learnt from the records.
        self.inputs = inputs
        self.assigner = assigner_of(spec)
        self.aggregator = self._aggregator_of(functions)
        # Built once here so a mistake such as a session window without merge fails at worker start,
        # not on a partition's first record.
        WindowedAggregation(self.assigner, self.aggregator)
        self.closed_end = isinstance(spec, Sliding)
        #: Where each result's close wait goes (``cadenza_window_close_wait_seconds``):
        #: wall-clock seconds from the window's end plus ``delay`` to its closing; None: not measured.
        self.close_wait = close_wait
        self.lateness = allowed_lateness
        self.partitions: dict[int, _Partition] = {}

    def _aggregator_of(self, functions: NodeFunctions) -> Aggregator[Any, Any, Any]:
        """What the windows fold their values with (values are records here)."""
        return aggregator_of(functions)

    # -- partitions ---------------------------------------------------------------------------------

    def _open(self, partition: int, entries: dict[Any, Any] | None = None) -> _Partition:
        view = self._view(partition, entries)
        aggregation: WindowedAggregation[Any, Any, Any, Any] = WindowedAggregation(
            self.assigner, self.aggregator, self.lateness, state=view
        )
        part = self.partitions[partition] = _Partition(
            aggregation, view, self._tracker(partition, self.inputs or ())
        )
        return part

    def _resume(self, part: _Partition, position: Position) -> None:
        super()._resume(part, position)
        # The aggregation's own watermark comes back as it was (the tracker's minimum may be lower if an
        # input was idle then), so records late before the crash stay late after it.
        part.pending = part.aggregation.advance(
            max(position.watermark, part.tracker.watermark()), on_error=part.pending_failures.append
        )

    # -- records ------------------------------------------------------------------------------------

    def process(self, unit: Unit, key: Any, value: Any, event_time: float, window: Window | None) -> None:
        self._fold(unit, key, value, event_time, value)

    def _fold(self, unit: Unit, key: Any, value: Any, event_time: float, raw: Any) -> None:
        """Fold ``value`` into its windows; ``raw`` is the record's own value (what a sliding window
        buffers and the late topic shows), which differs from ``value`` for a lifted window."""
        partition = unit.partition
        part = self._part(partition)
        if not self._fresh(part, unit):
            return
        if part.pending_failures:
            failed, part.pending_failures = part.pending_failures, []
            for failure in failed:
                self.dead.function_failed(unit, self.node_id, failure.error)
        if part.pending:
            pending, part.pending = part.pending, []
            self._emit(unit, pending)
        aggregation = part.aggregation
        try:
            encode_key(key)  # state must reach the changelog: refuse what cannot, before it is stored
            late = aggregation.add(key, event_time, value)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:
            self.dead.function_failed(unit, self.node_id, _in_step(exc, self.node_id))
            return
        entry = part.view.get(key)
        if entry is not None:
            try:
                for slot in entry[0]:  # [start, end, accumulator] per window: the accumulators are the user's
                    check(slot[2])
                if self.closed_end:
                    check(raw)  # sliding windows buffer the records themselves
            except UnsupportedValueError as exc:
                del part.view[key]  # what cannot be changelogged cannot stay: the key starts afresh
                self.dead.function_failed(
                    unit,
                    self.node_id,
                    UnsupportedValueError(
                        f"step {self.node_id!r}: window state for this record's key cannot be stored, so "
                        f"it was discarded: {exc}"
                    ),
                )
                return
        if late:
            watermark = aggregation.watermark
            for missed in late:
                self.dead.late(unit, self.node_id, missed, raw, watermark)
        origin = unit.origin
        source = 0 if origin is None else origin[0]
        self._observed(part, partition, source, event_time, unit.offset, record=True)
        failures: list[WindowFailure] = []
        results = aggregation.advance(part.tracker.watermark(), on_error=failures.append)
        for failure in failures:  # the user's result() raised while closing these windows
            self.dead.function_failed(unit, self.node_id, failure.error)
        if results:
            self._emit(unit, results)

    def progress(self, unit: Unit, source: int, event_time: float) -> None:
        """Apply a progress record: upstream partition ``source`` has got to ``event_time``.

        Handled like a record's event time without its value, so the watermark (and what it closes)
        moves with it; its offset goes into the changelog position like a record's.
        """
        partition = unit.partition
        part = self._part(partition)
        if not self._fresh_progress(part, unit, source):
            return
        self._observed(part, partition, source, event_time, unit.offset)
        if part.pending_failures:
            failed, part.pending_failures = part.pending_failures, []
            for failure in failed:
                self.dead.function_failed(unit, self.node_id, failure.error)
        failures: list[WindowFailure] = []
        results = part.pending + part.aggregation.advance(part.tracker.watermark(), on_error=failures.append)
        part.pending = []
        for failure in failures:
            self.dead.function_failed(unit, self.node_id, failure.error)
        if results:
            self._emit(unit, results)

    def _emit(self, unit: Unit, results: list[WindowResult]) -> None:
        following = self.next
        closed_end = self.closed_end
        self.counters.window_results += len(results)
        close_wait = self.close_wait
        if close_wait is not None:
            closes = time.time() - self.lateness - self.max_out_of_orderness
            for result in results:
                close_wait.observe(closes - result.window.end)
        for result in results:
            window = result.window
            following.process(unit, result.key, result.result, result_event_time(window, closed_end), window)

    # -- changelog ------------------------------------------------------------------------------------

    def _position(self, part: _Partition) -> Position:
        return Position(
            offset=part.next_offset,
            watermark=part.aggregation.watermark,
            event_times=dict(part.event_times),
            origins=dict(part.origins),
        )


class LiftedWindowOp(WindowOp):
    """A window aggregate declared with ``parallel=``: lessees lift its records, this folds the lifts.

    Each value it receives is a :class:`~cadenza.operators.Lifted` record, ``Lifted(value, partial)``
    with ``partial = Lift(init, add)(value)`` computed on a lessee (or the
    :class:`~cadenza.operators.LiftFailure` of that call), in offset order per partition like any
    record. The windows merge the partial where :class:`WindowOp` adds the value
    (:class:`~cadenza.operators.LiftedAggregator`); everything else is :class:`WindowOp`'s: window
    assignment, watermarks, lateness, session merging, closing, the changelog and its format. The late
    topic gets the record's own value, and a failed lift is dead-lettered exactly when the plain
    window's ``add`` would have raised (never for a record late for all its windows, nor one the
    restored state already holds), which is why the runtime must hand failures on, not dead-letter them.

    A subclass rather than a flag so that the plain window's per-record path has no branch for this.
    """

    __slots__ = ()

    def _aggregator_of(self, functions: NodeFunctions) -> Aggregator[Any, Any, Any]:
        try:
            return LiftedAggregator(aggregator_of(functions))
        except ConfigError as exc:
            raise ConfigError(f"step {self.node_id!r}: {exc}") from None

    def process(self, unit: Unit, key: Any, value: Any, event_time: float, window: Window | None) -> None:
        self._fold(unit, key, value, event_time, value[0])  # value: Lifted(the record's value, partial)


def _in_step(exc: BaseException, node_id: str) -> BaseException:
    if isinstance(exc, UnsupportedValueError):
        return UnsupportedValueError(f"step {node_id!r}: {exc}")
    return exc
