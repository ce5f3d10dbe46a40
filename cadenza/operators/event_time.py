"""Event time: watermarks across input partitions, and the in-memory core of windowed aggregation.

Lateness has one rule everywhere: a window is *closed* once ``window end + allowed lateness <=
watermark``. A closed window is emitted exactly once and then forgotten; a record that would land only
in closed windows is reported late and dropped for them. For session windows the "window" a new
record would open is judged by the record's own time (``t + allowed lateness <= watermark`` means
late): that is what guarantees a record can never reopen a session that was already emitted.

User functions may raise. Adding a record is atomic: every new accumulator is computed before any is
stored, so an ``add`` (or session ``merge``) that raises leaves the state exactly as it was. Closing
a window whose ``result`` raises still removes the window; the failure is reported once, as a
:class:`WindowFailure`, and the other windows come out as usual.
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from collections.abc import Callable, Hashable, Iterable
from heapq import heapify, heappop, heappush
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, TypeVar, cast

from cadenza.durations import parse_duration
from cadenza.errors import ConfigError
from cadenza.operators.aggregations import Aggregator
from cadenza.operators.lift import LiftedAggregator
from cadenza.operators.window_assigners import (
    Duration,
    HoppingWindows,
    SessionWindows,
    SlidingWindows,
    TumblingWindows,
    Window,
    WindowAssigner,
)

if TYPE_CHECKING:  # the state package loads the Kafka client; these operators are pure logic
    from cadenza.state.store import PartitionState

__all__ = [
    "EventTimeState",
    "Late",
    "WatermarkTracker",
    "WindowFailure",
    "WindowResult",
    "WindowedAggregation",
]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
A = TypeVar("A")
R = TypeVar("R")

_NEG_INF = -math.inf
#: How much earlier than an input's idle timeout :meth:`WatermarkTracker.watermark` looks again (s).
_CHECK_MARGIN = 1e-6


def _seconds(value: Duration, what: str) -> float:
    try:
        return parse_duration(value, what=what)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc


class _PartitionClock:
    __slots__ = ("idle", "last_active", "max_event_time", "timed_out")

    def __init__(self, now: float) -> None:
        self.max_event_time = _NEG_INF
        self.last_active = now
        self.idle = False
        #: The idle timeout fired and was reported; cleared by the partition's next record.
        self.timed_out = False


def _closing_order(result: WindowResult) -> tuple[float, float]:
    return result.window.end, result.window.start


class WatermarkTracker:
    """The watermark of an operator reading several partitions.

    Per partition, the watermark is the largest event time seen minus ``max_out_of_orderness``; the
    operator's is the minimum over its partitions, because any one of them may still deliver records
    that old. A partition that has not delivered anything yet therefore holds the watermark at ``-inf``
    until it does, or until it is declared idle: by :meth:`mark_idle` (say, the fetcher saw it reach its
    end offset) or by going ``idle_timeout`` seconds of physical time without a record. An idle
    partition rejoins with its next record. The watermark never goes backwards, even when a partition
    rejoins behind it; records that old are then late, which is the point of a watermark. When every
    partition is idle, the watermark is the minimum over those that delivered anything: quiet inputs
    neither hold it back nor push it beyond what was seen.

    Pass every input in ``partitions`` up front (the worker knows them from its plan): an input the
    tracker has not heard of cannot hold the watermark back, so one that merely delivers later than
    the others would find its records late. ``on_idle`` is called with an input each time its idle
    timeout fires (once per silence: the input's next record re-arms it), so that the worker can
    count and log it.
    """

    __slots__ = (
        "_check_at",
        "_clock",
        "_current",
        "_dirty",
        "_heap",
        "_idle_timeout",
        "_ids",
        "_max_ooo",
        "_on_idle",
        "_partitions",
    )

    def __init__(
        self,
        partitions: Iterable[Hashable] = (),
        *,
        max_out_of_orderness: Duration = 0.0,
        idle_timeout: Duration | None = None,
        clock: Callable[[], float] = time.monotonic,
        on_idle: Callable[[Hashable], object] | None = None,
    ) -> None:
        self._max_ooo = _seconds(max_out_of_orderness, "max_out_of_orderness")
        self._on_idle = on_idle
        self._idle_timeout = None if idle_timeout is None else _seconds(idle_timeout, "idle_timeout")
        self._clock = clock
        self._current = _NEG_INF
        now = clock()
        self._partitions: dict[Hashable, _PartitionClock] = {p: _PartitionClock(now) for p in partitions}
        # :meth:`watermark` is asked at every record, and a full pass over the partitions costs their
        # number (a window after a key_by has one per upstream partition). So a pass keeps the
        # partitions holding the watermark back in a heap by largest event time (``_heap``: entries
        # ``(event time, tiebreak, partition)``; a record that raises a partition's time pushes a
        # new entry, and outdated ones are dropped when they reach the top), and the earliest time
        # one of them can time out (``_check_at``). Another pass is made only then, or when a
        # partition joins, leaves, goes idle or comes back (``_dirty``).
        self._heap: list[tuple[float, int, Hashable]] = []
        self._ids = itertools.count()  # the tiebreak: partitions need not be comparable
        self._check_at = _NEG_INF
        self._dirty = True

    @property
    def partitions(self) -> list[Hashable]:
        return list(self._partitions)

    def add_partition(self, partition: Hashable) -> None:
        """Start tracking a newly assigned partition (it holds the watermark back until it delivers)."""
        if partition not in self._partitions:
            self._partitions[partition] = _PartitionClock(self._clock())
            self._dirty = True

    def remove_partition(self, partition: Hashable) -> None:
        """Stop tracking a revoked partition."""
        if self._partitions.pop(partition, None) is not None:
            self._dirty = True

    def observe(self, partition: Hashable, event_time: float) -> None:
        """Account a record; partitions not seen before are added on the fly."""
        clock = self._partitions.get(partition)
        if clock is None:
            clock = self._partitions[partition] = _PartitionClock(0.0)
            self._dirty = True
        elif clock.idle or clock.timed_out:
            self._dirty = True  # it rejoins
        if event_time > clock.max_event_time:
            clock.max_event_time = event_time
            if not self._dirty:
                heap = self._heap
                heappush(heap, (event_time, next(self._ids), partition))
        clock.idle = False
        clock.timed_out = False
        if self._idle_timeout is not None:
            clock.last_active = self._clock()

    def heard(self, partition: Hashable) -> None:
        """A record of ``partition`` came that moves no event time: a copy of one already counted, or
        one the restored state already holds. The input is replaying, not silent, so its idle timeout
        starts again; otherwise a replay longer than the timeout would let the watermark pass the
        records the replay leads up to, and make them late."""
        clock = self._partitions.get(partition)
        if clock is not None:
            if clock.idle or clock.timed_out:
                self._dirty = True
            clock.idle = False
            clock.timed_out = False
            if self._idle_timeout is not None:
                clock.last_active = self._clock()

    def mark_idle(self, partition: Hashable) -> None:
        """Let ``partition`` stop holding the watermark back until its next record."""
        clock = self._partitions.get(partition)
        if clock is not None and not clock.idle:
            clock.idle = True
            self._dirty = True

    def is_idle(self, partition: Hashable) -> bool:
        clock = self._partitions[partition]
        return clock.idle or self._timed_out(clock, self._now())

    def _now(self) -> float:
        return self._clock() if self._idle_timeout is not None else 0.0

    def _timed_out(self, clock: _PartitionClock, now: float) -> bool:
        timeout = self._idle_timeout
        return timeout is not None and now - clock.last_active >= timeout

    def watermark(self) -> float:
        """The operator's current watermark (``-inf`` until every active partition has delivered)."""
        now = self._now()
        heap = self._heap
        if not self._dirty and now < self._check_at and len(heap) <= 2 * len(self._partitions) + 8:
            partitions = self._partitions
            while heap:
                event_time, _, partition = heap[0]
                clock = partitions.get(partition)
                if clock is not None and clock.max_event_time == event_time:
                    low = event_time - self._max_ooo
                    self._current = max(self._current, low)
                    break
                heappop(heap)  # outdated: the partition has a later entry
            return self._current  # an empty heap: every partition idle, as the last pass found
        timeout = self._idle_timeout
        lowest = math.inf
        lowest_delivered = math.inf  # used when every partition is idle
        check_at = math.inf
        heap = []
        for partition, clock in self._partitions.items():
            if clock.idle or self._timed_out(clock, now):
                if not clock.idle and not clock.timed_out:
                    clock.timed_out = True
                    if self._on_idle is not None:
                        self._on_idle(partition)
                if clock.max_event_time != _NEG_INF:
                    lowest_delivered = min(lowest_delivered, clock.max_event_time)
                continue
            lowest = min(lowest, clock.max_event_time)
            heap.append((clock.max_event_time, next(self._ids), partition))
            if timeout is not None:
                # A hair early: now - last_active >= timeout must never be missed to rounding.
                check_at = min(check_at, clock.last_active + timeout - _CHECK_MARGIN)
        if lowest == math.inf:
            lowest = lowest_delivered
        if lowest != math.inf:
            self._current = max(self._current, lowest - self._max_ooo)
        heapify(heap)
        self._heap = heap
        self._check_at = check_at
        self._dirty = False
        return self._current

    def is_late(self, window_end: float, allowed_lateness: float = 0.0) -> bool:
        """Whether a window ending at ``window_end`` is closed: ``end + allowed_lateness <= watermark``.

        For operators without windows, pass the record's event time.
        """
        return window_end + allowed_lateness <= self.watermark()


class Late(NamedTuple):
    """A record that missed ``window`` because that window had already closed."""

    key: Any
    event_time: float
    window: Window


class WindowResult(NamedTuple):
    """One closed window's final result."""

    key: Any
    window: Window
    result: Any


class WindowFailure(NamedTuple):
    """A closed window whose ``result`` raised ``error``; the window is gone from state all the same."""

    key: Any
    window: Window
    error: Exception


class EventTimeState:
    """What the window aggregation and the join share: keyed state in a
    :data:`~cadenza.state.store.PartitionState`, an index of it ordered by the time an entry expires
    (a heap, with a sequence number breaking ties), the allowed lateness and the watermark last seen.

    The watermark is not stored: after a restore it starts from ``-inf`` and the next ``advance``
    raises it. Subclasses rebuild their heap from the restored state.
    """

    __slots__ = ("_heap", "_lateness", "_seq", "_state", "_watermark")

    def __init__(self, lateness: float, state: PartitionState | None) -> None:
        self._lateness = lateness
        self._state: PartitionState = {} if state is None else state
        self._watermark = _NEG_INF
        self._heap: list[tuple[float, int, Any]] = []
        self._seq = itertools.count()

    @property
    def watermark(self) -> float:
        return self._watermark

    @property
    def allowed_lateness(self) -> float:
        return self._lateness

    @property
    def state(self) -> PartitionState:
        return self._state


# Window state (a :data:`~cadenza.state.store.PartitionState`): record key -> ``[windows, buffer]``,
# both lists of plain lists (``[start, end, accumulator]`` and, for sliding windows only,
# ``[event_time, value]``).


class WindowedAggregation(EventTimeState, Generic[K, V, A, R]):
    """Keyed window aggregation over event time, emitting each window once when it closes.

    Feed records with :meth:`add` in offset order (per input partition) and call :meth:`advance` with
    the operator's watermark; ``advance`` returns the windows that closed, in order of closing time.
    State lives in ``state`` (a :data:`~cadenza.state.store.PartitionState`); passing a restored one
    resumes where it was, the closing-time index being rebuilt from it. The watermark itself is not
    stored: after a restore it starts from ``-inf`` and is raised by the next ``advance``.

    :meth:`add` is atomic: when the aggregator's ``add`` or ``merge`` raises, the exception propagates
    and no window changed (provided those functions do not mutate the accumulators they are given, as
    the :class:`~cadenza.operators.Aggregator` contract requires). For ``result`` raising in
    :meth:`advance`, see there.
    """

    __slots__ = ("_add", "_agg", "_assign", "_failed", "_gap", "_ready", "_size")

    def __init__(
        self,
        assigner: WindowAssigner,
        aggregator: Aggregator[V, A, R],
        allowed_lateness: Duration = 0.0,
        state: PartitionState | None = None,
    ) -> None:
        super().__init__(_seconds(allowed_lateness, "allowed_lateness"), state)
        self._agg = aggregator
        #: Closed windows not handed out yet: results and failures, kept when advance raised.
        self._ready: list[WindowResult] = []
        self._failed: list[WindowFailure] = []
        self._size = 0.0
        self._gap = 0.0
        self._add: Callable[[Any, float, Any], list[Late]]
        self._assign: Callable[[float], list[Window]] | None = None
        if isinstance(assigner, TumblingWindows | HoppingWindows):
            self._assign = assigner.assign
            self._add = self._add_fixed
        elif isinstance(assigner, SlidingWindows):
            self._size = assigner.size
            # A lifted window's values are Lifted records (the aggregator's V), whatever V says here.
            lifted = isinstance(cast(object, aggregator), LiftedAggregator)
            self._add = self._add_sliding_lifted if lifted else self._add_sliding
        elif isinstance(assigner, SessionWindows):
            if getattr(aggregator, "mergeable", True) is False or not callable(
                getattr(aggregator, "merge", None)
            ):
                raise ConfigError(
                    f"session windows merge when a record bridges two sessions, so their aggregator needs "
                    f"a merge function; {aggregator!r} has none (pass merge=... to aggregate())"
                )
            self._gap = assigner.gap
            self._add = self._add_session
        else:
            raise ConfigError(f"not a window assigner: {assigner!r}")
        self._rebuild_index()

    def add(self, key: K, event_time: float, value: V) -> list[Late]:
        """Aggregate one record; returns the windows it missed because they had closed (often none)."""
        if event_time - event_time != 0.0:  # NaN or infinite: no window can hold it
            raise ValueError(f"event time must be a finite number of seconds, got {event_time!r}")
        return self._add(key, event_time, value)

    def advance(
        self, watermark: float, on_error: Callable[[WindowFailure], object] | None = None
    ) -> list[WindowResult]:
        """Raise the watermark; return every window that closed, each exactly once, by closing time.

        Every due window is closed and removed from state, even when the aggregator's ``result`` raises
        for some of them. Each such window is reported exactly once as a :class:`WindowFailure`:

        * to ``on_error``, called for each failure before returning (after the state is updated);
        * without ``on_error``, by raising once the state is consistent: the ``result`` exception itself
          for one failure, an :class:`ExceptionGroup` of them for several. The windows that closed fine
          in that call are not lost: the next ``advance`` returns them (even with the same watermark).

        If ``on_error`` itself raises, that exception propagates the same way: results are kept for
        the next ``advance``, and failures not yet handed to ``on_error`` are reported by it.
        """
        ready, failed = self._ready, self._failed
        if watermark > self._watermark:
            self._watermark = watermark
            heap = self._heap
            count = len(ready)
            while heap and heap[0][0] <= watermark:
                item = heapq.heappop(heap)
                try:
                    self._close(item[2], watermark, ready, failed)
                except BaseException:
                    heapq.heappush(heap, item)  # not an Exception from result(): the key was left unchanged
                    raise
            if len(ready) > 1 and len(ready) != count:
                # One key's entry closes all its due windows at once, so restore the global order here.
                ready.sort(key=_closing_order)
        if not ready and not failed:
            return []
        self._ready, self._failed = [], []
        if failed:
            if on_error is None:
                self._ready = ready
                if len(failed) == 1:
                    raise failed[0].error
                raise ExceptionGroup(
                    f"result() raised for {len(failed)} closed windows", [failure.error for failure in failed]
                )
            for index, failure in enumerate(failed):
                try:
                    on_error(failure)
                except BaseException:
                    self._ready = ready
                    self._failed = failed[index + 1 :]
                    raise
        return ready

    # -- index of closing times ---------------------------------------------------------------------

    def _push(self, close_time: float, key: Any) -> None:
        # Entries may go stale (a session merged away, a window already emitted): popping one only
        # triggers a look at the key's current windows, so stale entries cost a scan, never a result.
        heapq.heappush(self._heap, (close_time, next(self._seq), key))

    def _rebuild_index(self) -> None:
        lateness = self._lateness
        for key, (windows, buffer) in self._state.items():
            for slot in windows:
                self._push(slot[1] + lateness, key)
            if buffer:
                self._push(min(item[0] for item in buffer) + self._size + lateness, key)

    def _close(
        self, key: Any, watermark: float, out: list[WindowResult], failed: list[WindowFailure]
    ) -> None:
        entry = self._state.get(key)
        if entry is None:
            return
        windows, buffer = entry
        lateness = self._lateness
        keep: list[Any] = []
        closed: list[Any] = []
        for slot in windows:
            (closed if slot[1] + lateness <= watermark else keep).append(slot)
        results: list[WindowResult] = []
        failures: list[WindowFailure] = []
        if closed:
            result = self._agg.result
            for slot in closed:
                window = Window(slot[0], slot[1])
                try:
                    results.append(WindowResult(key, window, result(slot[2])))
                except Exception as exc:  # the window closes all the same; the caller hears of it once
                    failures.append(WindowFailure(key, window, exc))
        kept_buffer = buffer
        if buffer:
            # A buffered record at t can only matter to windows ending by t + size; once those are all
            # closed it goes. Whatever stays gets a fresh index entry (always after this watermark).
            horizon = watermark - self._size - lateness
            kept_buffer = [item for item in buffer if item[0] > horizon]
            if kept_buffer:
                self._push(min(item[0] for item in kept_buffer) + self._size + lateness, key)
        if not keep and not kept_buffer:
            del self._state[key]
        elif closed or len(kept_buffer) != len(buffer):
            self._state[key] = [keep, kept_buffer]
        out.extend(results)
        failed.extend(failures)

    # -- per-kind record paths ----------------------------------------------------------------------

    # Each path computes every new accumulator before it stores anything, and builds new slot lists
    # rather than updating those the mapping handed out: a raising add or merge leaves state as it was.

    def _add_fixed(self, key: Any, t: float, value: Any) -> list[Late]:
        assign = self._assign
        assert assign is not None
        agg = self._agg
        lateness = self._lateness
        watermark = self._watermark
        late: list[Late] = []
        entry: list[Any] | None = None
        updated: list[tuple[int, list[Any]]] = []  # (index in entry's windows, new slot)
        opened: list[list[Any]] = []
        for window in assign(t):
            start, end = window
            if end + lateness <= watermark:
                late.append(Late(key, t, window))
                continue
            if entry is None:
                entry = self._state.get(key) or [[], []]
            for index, slot in enumerate(entry[0]):
                if slot[1] == end and slot[0] == start:
                    updated.append((index, [start, end, agg.add(slot[2], value)]))
                    break
            else:
                opened.append([start, end, agg.add(agg.init(), value)])
        if entry is not None:
            windows = list(entry[0])
            for index, slot in updated:
                windows[index] = slot
            windows.extend(opened)
            for slot in opened:
                self._push(slot[1] + lateness, key)
            self._state[key] = [windows, entry[1]]
        return late

    def _add_sliding(self, key: Any, t: float, value: Any) -> list[Late]:
        return self._slide(key, t, value, value, self._agg)

    def _add_sliding_lifted(self, key: Any, t: float, record: Any) -> list[Late]:
        """:meth:`_add_sliding` for a record lifted on a lessee (a :class:`~cadenza.operators.Lifted`):
        the windows it falls in merge its partial, but the buffer keeps its value, as without lessees,
        and the window it opens folds the buffered values with the plain ``add`` before merging its own
        partial. So the state is the plain window's (a step can change its ``parallel`` and restore the
        other's changelog), and so are the failures: a buffered value whose ``add`` raises fails each
        window opened over it, as it would without lessees."""
        lifted = cast(LiftedAggregator[Any, Any], self._agg)  # chosen for one in __init__
        return self._slide(key, t, record, record[0], lifted.plain)

    def _slide(
        self, key: Any, t: float, value: Any, raw: Any, plain: Aggregator[Any, Any, Any]
    ) -> list[Late]:
        """A sliding window's record: ``value`` is folded into the open windows it falls in (with the
        window's ``add``), ``raw`` is what the buffer keeps, and ``plain`` folds the buffered values
        into the window the record opens, before the record's own ``value``."""
        size = self._size
        lateness = self._lateness
        watermark = self._watermark
        own_late = t + lateness <= watermark
        if t + size + lateness <= watermark:
            # Every window that could hold t ends by t + size, and all of those are closed.
            return [Late(key, t, Window(t - size, t))]
        agg = self._agg
        windows, buffer = self._state.get(key) or [[], []]
        own_exists = False
        new_windows: list[Any] = []
        for slot in windows:  # every window in state is open: closed ones are removed by advance
            if slot[0] <= t <= slot[1]:
                new_windows.append([slot[0], slot[1], agg.add(slot[2], value)])
                if slot[1] == t:
                    own_exists = True
            else:
                new_windows.append(slot)
        opens = not own_late and not own_exists
        if opens:
            start = t - size
            acc = plain.init()
            for item in buffer:
                if start <= item[0] <= t:
                    acc = plain.add(acc, item[1])
            new_windows.append([start, t, agg.add(acc, value)])  # the record is the buffer's last
        if not buffer:
            self._push(t + size + lateness, key)  # so the buffer gets pruned even if no window closes
        if opens:
            self._push(t + lateness, key)
        self._state[key] = [new_windows, [*buffer, [t, raw]]]
        return [Late(key, t, Window(t - size, t))] if own_late else []

    def _add_session(self, key: Any, t: float, value: Any) -> list[Late]:
        gap = self._gap
        lateness = self._lateness
        if t + lateness <= self._watermark:
            return [Late(key, t, Window(t, t + gap))]
        agg = self._agg
        entry = self._state.get(key) or [[], []]
        start, end = t, t + gap
        acc: Any = None
        merged = 0
        indexed_end = -math.inf  # latest end among merged sessions: the index already has an entry for it
        keep: list[Any] = []
        for slot in entry[0]:
            if slot[0] <= end and t <= slot[1]:  # touches the record's own [t, t + gap)
                merged += 1
                start = min(start, slot[0])
                indexed_end = max(indexed_end, slot[1])
                acc = slot[2] if merged == 1 else agg.merge(acc, slot[2])
            else:
                keep.append(slot)
        end = max(end, indexed_end)
        acc = agg.add(agg.init() if merged == 0 else acc, value)
        keep.append([start, end, acc])
        self._state[key] = [keep, entry[1]]
        if end != indexed_end:
            self._push(end + lateness, key)
        return []
