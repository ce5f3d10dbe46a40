"""Window kinds over float-second event times, and the session merge they need.

Four kinds, all aligned to epoch 0 where alignment applies:

- **tumbling(size)**: ``[k*size, (k+1)*size)``; each time falls in exactly one window.
- **hopping(size, hop)**: ``[k*hop, k*hop + size)``; a time falls in about ``size / hop`` windows (or
  in none, in the gaps, when ``hop > size``). Windows starting before 0 are kept, unlike Kafka Streams.
- **sliding(size)**: cadenza uses the record-anchored definition, not Kafka Streams' own: *each record
  at time t defines the window [t - size, t], closed at both ends*, and that window aggregates every
  record whose time lies in it. So there is one window per distinct record time per key, and a record
  contributes to its own window and to the windows of records up to ``size`` after it. Kafka Streams
  additionally emits the windows that start just after each record; those carry no result the
  record-anchored windows do not, and they would need an epsilon that float seconds do not have.
- **session(gap)**: records of a key closer than or exactly ``gap`` apart form one session. A session
  is reported as ``[first, last + gap)``: its end is the earliest time at which a further record would
  start a new session, which makes the closing rule the same as for every other kind ("end + allowed
  lateness <= watermark").

Boundaries are float arithmetic: with times and sizes that are exact binary fractions (whole
seconds, halves, quarters...) they are exact; with others (0.1 s) they carry rounding error, but a
time is always placed in windows that contain it by float comparison, so nothing falls between two.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import NamedTuple

from cadenza.durations import parse_duration
from cadenza.errors import ConfigError

__all__ = [
    "HoppingWindows",
    "SessionStore",
    "SessionWindows",
    "SlidingWindows",
    "TumblingWindows",
    "Window",
    "WindowAssigner",
    "hopping",
    "merge_session",
    "session",
    "sliding",
    "tumbling",
]


class Window(NamedTuple):
    """A window of event time: ``[start, end)`` for every kind except sliding, which is ``[start, end]``.

    A NamedTuple so it hashes, orders by start, and serializes as a plain 2-element array.
    """

    start: float
    end: float


Duration = str | float | timedelta


def _positive(value: Duration, what: str) -> float:
    try:
        seconds = parse_duration(value, what=what)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    if seconds <= 0:
        raise ConfigError(f"{what}: must be greater than zero, got {value!r}")
    return seconds


@dataclass(frozen=True, slots=True)
class TumblingWindows:
    """Fixed, non-overlapping windows of ``size`` seconds."""

    size: float

    def assign(self, t: float) -> list[Window]:
        size = self.size
        start = math.floor(t / size) * size
        # The division can round across a boundary; one step back or forth puts t inside again.
        if start > t:
            start -= size
        elif start + size <= t:
            start += size
        return [Window(start, start + size)]


@dataclass(frozen=True, slots=True)
class HoppingWindows:
    """Windows of ``size`` seconds starting every ``hop`` seconds."""

    size: float
    hop: float

    def assign(self, t: float) -> list[Window]:
        size, hop = self.size, self.hop
        k = math.floor(t / hop)
        while k * hop > t:
            k -= 1
        while (k + 1) * hop <= t:
            k += 1
        windows: list[Window] = []
        while k * hop + size > t:
            windows.append(Window(k * hop, k * hop + size))
            k -= 1
        windows.reverse()
        return windows


@dataclass(frozen=True, slots=True)
class SlidingWindows:
    """Record-anchored windows ``[t - size, t]`` (see the module docstring for why this definition)."""

    size: float

    def window_of(self, t: float) -> Window:
        return Window(t - self.size, t)


@dataclass(frozen=True, slots=True)
class SessionWindows:
    """Sessions of records at most ``gap`` apart, reported as ``[first, last + gap)``."""

    gap: float

    def window_of(self, t: float) -> Window:
        """The session a lone record at ``t`` makes."""
        return Window(t, t + self.gap)


WindowAssigner = TumblingWindows | HoppingWindows | SlidingWindows | SessionWindows


def tumbling(size: Duration) -> TumblingWindows:
    return TumblingWindows(_positive(size, "tumbling window size"))


def hopping(size: Duration, hop: Duration) -> HoppingWindows:
    return HoppingWindows(_positive(size, "hopping window size"), _positive(hop, "hopping window hop"))


def sliding(size: Duration) -> SlidingWindows:
    return SlidingWindows(_positive(size, "sliding window size"))


def session(gap: Duration) -> SessionWindows:
    return SessionWindows(_positive(gap, "session gap"))


def merge_session(sessions: Iterable[Window], t: float, gap: float) -> tuple[Window, list[Window]]:
    """The session a record at ``t`` ends up in, and the existing sessions it absorbs.

    A session ``[s, e)`` absorbs the record when the record's own session ``[t, t + gap)`` touches it
    (``s <= t + gap`` and ``t <= e``): touching, not overlapping, because records exactly ``gap``
    apart belong together. Sessions never touch each other, so only sessions touching the record's
    own one can be merged; a record may bridge two of them.
    """
    start, end = t, t + gap
    merged: list[Window] = []
    for window in sessions:
        if window.start <= t + gap and t <= window.end:
            merged.append(window)
            start = min(start, window.start)
            end = max(end, window.end)
    return Window(start, end), merged


class SessionStore:
    """The sessions of one key: add a record time, learn which session it joined and what merged away.

    The window aggregation keeps the same structure inside its state (with accumulators attached);
    this class is the bare geometry, for operators that keep their own per-session state.
    """

    __slots__ = ("_gap", "_sessions")

    def __init__(self, gap: float, sessions: Iterable[Window] = ()) -> None:
        if gap <= 0:
            raise ConfigError(f"session gap must be greater than zero, got {gap!r}")
        self._gap = gap
        self._sessions: list[Window] = sorted(Window(*w) for w in sessions)

    @property
    def sessions(self) -> list[Window]:
        """Current sessions, ordered by start (a copy)."""
        return list(self._sessions)

    def add(self, t: float) -> tuple[Window, list[Window]]:
        """Add a record at ``t``: the session now holding it, and the old sessions merged into it.

        When the record falls inside an existing session, that session comes back unchanged and is
        also listed as merged away (it is replaced by an equal window); callers compare to tell.
        """
        window, merged = merge_session(self._sessions, t, self._gap)
        if merged:
            gone = set(merged)
            self._sessions = [w for w in self._sessions if w not in gone]
        # Keep order by start; sessions are disjoint so this is also order by end.
        index = 0
        while index < len(self._sessions) and self._sessions[index].start < window.start:
            index += 1
        self._sessions.insert(index, window)
        return window, merged

    def remove(self, window: Window) -> None:
        """Forget a session (closed and emitted)."""
        self._sessions.remove(window)

    def __len__(self) -> int:
        return len(self._sessions)
