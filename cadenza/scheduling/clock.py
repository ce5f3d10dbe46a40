"""Clocks the scheduler and policies read time from.

Time is injected rather than read from :func:`time.time` directly so that scheduling decisions can be
replayed exactly in tests: a :class:`VirtualClock` only moves when the test moves it, which turns
"which record ran first" into a deterministic question.
"""

from __future__ import annotations

import math
import time
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "SystemClock", "VirtualClock"]


@runtime_checkable
class Clock(Protocol):
    """Anything that tells the current time as float epoch seconds."""

    def now(self) -> float:
        """Current time in seconds since the epoch (the scale of ``time.time()``)."""
        ...


class SystemClock:
    """Wall-clock time; frontier times come from broker timestamps, which are wall-clock too."""

    __slots__ = ()

    # A staticmethod bound straight to the C function spares a Python frame on every call; the
    # scheduler reads the clock once per quantum and once per head change.
    now = staticmethod(time.time)

    def __repr__(self) -> str:
        return "SystemClock()"


class VirtualClock:
    """A clock that only moves when told to, so tests can assert exact execution orders and times."""

    __slots__ = ("_now",)

    def __init__(self, start: float = 0.0) -> None:
        if not math.isfinite(start):
            raise ValueError(f"VirtualClock start must be finite, got {start!r}")
        self._now = float(start)

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> float:
        """Move forward by ``seconds`` and return the new time; time never runs backwards."""
        if not (0.0 <= seconds < math.inf):
            raise ValueError(
                f"VirtualClock can only advance by a finite, non-negative amount, got {seconds!r}"
            )
        self._now += seconds
        return self._now

    def set(self, when: float) -> None:
        """Jump to ``when``; refusing to go back keeps "now" monotonic as the scheduler assumes."""
        if not math.isfinite(when) or when < self._now:
            raise ValueError(f"VirtualClock cannot move from {self._now!r} back or to {when!r}")
        self._now = float(when)

    def __repr__(self) -> str:
        return f"VirtualClock({self._now!r})"
