"""The windowed stream-stream join, as pure logic: buffers of both sides per key, matched on arrival.

A left record at ``tl`` and a right record at ``tr`` with equal keys *match* when
``|tl - tr| <= within`` (both ends inclusive) and the optional ``on(left, right)`` holds. A match is
emitted as soon as its second record arrives, with event time ``max(tl, tr)``, the time at which the
pair became complete. ``how`` says what happens to a record that never matches: nothing (``inner``),
or a result with the missing side ``None`` for an unmatched left record (``left``) or an unmatched
record of either side (``outer``). That result comes out of :meth:`WindowedJoin.advance` once the
watermark makes a match impossible (see below), never before, so a record that matches late never
also produced a ``(x, None)``; its event time is the record's own.

Lateness follows the rule of every other windowed step (see :mod:`cadenza.operators.event_time`):
a record's *join window* is ``[t - within, t + within]``, and it is closed once
``t + within + allowed_lateness <= watermark``. A record whose window is closed on arrival is late:
reported, not buffered and not matched. That rule is what makes expiry safe: a buffered record at
``t`` can only match a record that is not late, at some ``t' > watermark - within - lateness``, so once
``t + 2 * within + lateness <= watermark`` it can never match again and is dropped from state. Hence
the result does not depend on when expiry runs, only on which records are late. The same moment is
when an unmatched record of an outer side is emitted: it is the earliest at which "it never matched"
is certain (its own window, ``t + within + lateness``, closed earlier; but a partner up to ``within``
later in event time is still on time until ``t + 2 * within + lateness``).

State lives in a mapping (see :data:`~cadenza.state.store.PartitionState`): key ->
``[left_buffer, right_buffer]``, each a list of ``[event_time, value]`` in arrival order (for a side
whose unmatched records are emitted, ``[event_time, value, matched]``, ``matched`` 0 or 1, so a
restored state still knows which records found a partner). Like the
window aggregation, this always writes an entry back after changing it and deletes empty ones, so a
changelogged mapping sees every change. Adding is atomic: when ``on`` raises, the exception propagates
and nothing was stored.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, get_args

from cadenza.errors import ConfigError
from cadenza.operators.event_time import EventTimeState, Late
from cadenza.operators.window_assigners import Window

if TYPE_CHECKING:  # the state package loads the Kafka client; these operators are pure logic
    from cadenza.state.store import PartitionState

__all__ = ["LEFT", "RIGHT", "JoinHow", "JoinMatch", "WindowedJoin"]

LEFT = 0
RIGHT = 1

JoinHow = Literal["inner", "left", "outer"]
"""Which unmatched records a join emits, with the missing side ``None``: none, the left side's, both."""


class JoinMatch(NamedTuple):
    """One matched pair (``event_time`` is the later of the two records' times), or an unmatched record
    of a left or outer join (one side ``None``, ``event_time`` the record's own)."""

    key: Any
    left: Any
    right: Any
    event_time: float


class WindowedJoin(EventTimeState):
    """Keyed join of two streams over event time (see the module docstring for the rules).

    Feed records with :meth:`add` (per side, in offset order) and raise the watermark with
    :meth:`advance`, which expires what can no longer match. Passing a restored ``state`` resumes where
    it was; the expiry index is rebuilt from it.
    """

    __slots__ = ("_horizon", "_how", "_on", "_outer", "_unmatched", "_within")

    def __init__(
        self,
        within: float,
        allowed_lateness: float = 0.0,
        on: Callable[[Any, Any], bool] | None = None,
        state: PartitionState | None = None,
        how: JoinHow = "inner",
    ) -> None:
        if how not in get_args(JoinHow):
            raise ConfigError(f"join how must be 'inner', 'left' or 'outer', got {how!r}")
        if not within >= 0 or math.isinf(within):
            raise ConfigError(f"join within must be a finite number of seconds >= 0, got {within!r}")
        if not allowed_lateness >= 0 or math.isinf(allowed_lateness):
            raise ConfigError(
                f"allowed_lateness must be a finite number of seconds >= 0, got {allowed_lateness!r}"
            )
        super().__init__(float(allowed_lateness), state)
        self._within = float(within)
        self._on = on
        self._how: JoinHow = how
        #: Per side, whether its unmatched records are emitted (and so carry a matched flag).
        self._outer = (how in ("left", "outer"), how == "outer")
        #: Unmatched records expired by :meth:`advance`, until :meth:`take_unmatched`.
        self._unmatched: list[JoinMatch] = []
        #: How long after its own time a buffered record can still match: 2 * within + lateness.
        self._horizon = 2 * self._within + self._lateness
        for key, (left, right) in self._state.items():
            self._push_min(key, left, right)

    @property
    def within(self) -> float:
        return self._within

    @property
    def how(self) -> JoinHow:
        return self._how

    def window_of(self, event_time: float) -> Window:
        """The join window of a record: the times a partner may have."""
        return Window(event_time - self._within, event_time + self._within)

    def add(self, side: int, key: Any, event_time: float, value: Any) -> tuple[list[JoinMatch], Late | None]:
        """Match one record against the other side's buffer, then buffer it.

        Returns the matches (in the other side's arrival order) and, for a late record, a
        :class:`~cadenza.operators.Late` (then there are no matches and nothing was stored).
        """
        if side not in (LEFT, RIGHT):
            raise ValueError(f"side must be {LEFT} (left) or {RIGHT} (right), got {side!r}")
        if event_time - event_time != 0.0:  # NaN or infinite
            raise ValueError(f"event time must be a finite number of seconds, got {event_time!r}")
        within = self._within
        if event_time + within + self._lateness <= self._watermark:
            return [], Late(key, event_time, self.window_of(event_time))
        entry = self._state.get(key)
        left: list[Any]
        right: list[Any]
        left, right = ([], []) if entry is None else (entry[0], entry[1])
        on = self._on
        matches: list[JoinMatch] = []
        matched: list[int] = []  # indices of the other side's records this one matched
        low, high = event_time - within, event_time + within
        if side == LEFT:
            for index, (other_time, other, *_) in enumerate(right):
                if low <= other_time <= high and (on is None or on(value, other)):
                    matches.append(JoinMatch(key, value, other, max(event_time, other_time)))
                    matched.append(index)
        else:
            for index, (other_time, other, *_) in enumerate(left):
                if low <= other_time <= high and (on is None or on(other, value)):
                    matches.append(JoinMatch(key, other, value, max(event_time, other_time)))
                    matched.append(index)
        outer = self._outer
        item = [event_time, value, 1 if matches else 0] if outer[side] else [event_time, value]
        if matched and outer[1 - side]:
            partners = list(right if side == LEFT else left)
            for index in matched:
                partner = partners[index]
                if len(partner) > 2 and not partner[2]:  # (a record buffered by an inner join has no flag)
                    partners[index] = [partner[0], partner[1], 1]
            left, right = (left, partners) if side == LEFT else (partners, right)
        new_left, new_right = ([*left, item], right) if side == LEFT else (left, [*right, item])
        oldest = _oldest(left, right)
        self._state[key] = [new_left, new_right]
        if event_time < oldest:  # otherwise the index already holds an entry due no later than this one
            self._push(event_time + self._horizon, key)
        return matches, None

    def advance(self, watermark: float) -> int:
        """Raise the watermark and drop buffered records that can no longer match; returns how many.

        The unmatched ones of an outer side are kept for :meth:`take_unmatched`.
        """
        if watermark <= self._watermark:
            return 0
        self._watermark = watermark
        heap = self._heap
        expired = 0
        horizon = self._horizon
        while heap and heap[0][0] <= watermark:
            key = heapq.heappop(heap)[2]
            entry = self._state.get(key)
            if entry is None:
                continue
            cutoff = watermark - horizon
            left = [item for item in entry[0] if item[0] > cutoff]
            right = [item for item in entry[1] if item[0] > cutoff]
            dropped = len(entry[0]) + len(entry[1]) - len(left) - len(right)
            if dropped and (self._outer[LEFT] or self._outer[RIGHT]):
                self._expire_unmatched(key, entry, cutoff)
            expired += dropped
            if not left and not right:
                del self._state[key]
                continue
            if dropped:
                self._state[key] = [left, right]
            self._push_min(key, left, right)
        return expired

    def take_unmatched(self) -> list[JoinMatch]:
        """The unmatched records :meth:`advance` expired since the last call, in event-time order."""
        unmatched = self._unmatched
        if not unmatched:
            return []  # never the list advance() goes on filling
        self._unmatched = []
        unmatched.sort(key=lambda match: match.event_time)
        return unmatched

    def _expire_unmatched(self, key: Any, entry: Any, cutoff: float) -> None:
        out = self._unmatched
        if self._outer[LEFT]:
            out.extend(JoinMatch(key, i[1], None, i[0]) for i in entry[LEFT] if i[0] <= cutoff and _open(i))
        if self._outer[RIGHT]:
            out.extend(JoinMatch(key, None, i[1], i[0]) for i in entry[RIGHT] if i[0] <= cutoff and _open(i))

    def _push(self, due: float, key: Any) -> None:
        heapq.heappush(self._heap, (due, next(self._seq), key))

    def _push_min(self, key: Any, left: list[Any], right: list[Any]) -> None:
        oldest = _oldest(left, right)
        if oldest != math.inf:
            self._push(oldest + self._horizon, key)


def _oldest(left: list[Any], right: list[Any]) -> float:
    oldest = math.inf
    for item in left:
        oldest = min(oldest, item[0])
    for item in right:
        oldest = min(oldest, item[0])
    return oldest


def _open(item: list[Any]) -> bool:
    """Whether a buffered record never matched (one buffered before the join emitted unmatched
    records, by an inner join, carries no flag and is taken as matched: it never owed a result)."""
    return len(item) > 2 and not item[2]
