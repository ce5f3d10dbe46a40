"""True and observed rates over windows, from counters that only grow.

DS2 decides from *true* rates: records per second of useful time, which say what an instance could
absorb if it never waited, whatever its current load. The worker already counts what they need for
its Prometheus export (records processed and produced, and the run-time histogram's sum, which is
the busy time), so the meter only differences those cumulative counters over a window: the hot path
gains nothing. This is the stats job's ``true_processing_rate`` (``sum(w) / sum(w * run_time)``)
with every execution counted (``w = 1``) instead of sampled spans.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from cadenza.scaling.ds2 import InstanceRates
from cadenza.scheduling.clock import Clock

__all__ = ["RateSample", "TrueRateMeter", "window_rates"]

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class RateSample:
    """Cumulative counters of one sub-topology instance: they only grow (a restart starts at 0)."""

    processed: int
    produced: int
    busy_s: float


def window_rates(before: RateSample | None, after: RateSample, wall_s: float) -> InstanceRates:
    """The rates between two samples ``wall_s`` seconds apart.

    A counter that went down means the instance restarted, so ``after`` is the whole window. With no
    busy time in the window the true rates are 0: nothing ran, so there is nothing to infer a
    capacity from (DS2 then treats the instance as unable to take input, and refuses to decide if
    input arrives rather than guessing).
    """
    if wall_s <= 0:
        raise ValueError(f"a rate window must last a positive time, got {wall_s!r}s")
    reset = before is None or (
        after.processed < before.processed or after.produced < before.produced or after.busy_s < before.busy_s
    )
    if reset or before is None:
        processed, produced, busy = after.processed, after.produced, after.busy_s
    else:
        processed = after.processed - before.processed
        produced = after.produced - before.produced
        busy = after.busy_s - before.busy_s
    if busy > 0:
        true_processing, true_output = processed / busy, produced / busy
    else:
        true_processing = true_output = 0.0
    return InstanceRates(true_processing, true_output, processed / wall_s, produced / wall_s)


class TrueRateMeter(Generic[K]):
    """Rates per key over consecutive windows of at least ``window_s`` seconds.

    Windows close lazily when :meth:`rates` is called (e.g. at a Prometheus scrape): the rates are
    exact over the window's real length, whenever it was closed.
    """

    def __init__(self, clock: Clock, read: Callable[[], Mapping[K, RateSample]], window_s: float) -> None:
        if not window_s > 0:
            raise ValueError(f"window_s must be positive, got {window_s!r}")
        self._clock = clock
        self._read = read
        self._window_s = window_s
        self._opened_at = clock.now()
        self._opened: Mapping[K, RateSample] = dict(read())
        self._last: dict[K, InstanceRates] = {}
        # Scrapes may come from several HTTP threads: one closes the window, the others see its result.
        self._lock = threading.Lock()

    def sample(self) -> dict[K, RateSample]:
        """The cumulative counters now (what the next window will be differenced from)."""
        return dict(self._read())

    def rates(self) -> dict[K, InstanceRates]:
        """The last closed window's rates per key (empty until the first window closes)."""
        with self._lock:
            now = self._clock.now()
            elapsed = now - self._opened_at
            if elapsed >= self._window_s:
                current = dict(self._read())
                self._last = {
                    key: window_rates(self._opened.get(key), sample, elapsed)
                    for key, sample in current.items()
                }
                self._opened, self._opened_at = current, now
            return dict(self._last)
