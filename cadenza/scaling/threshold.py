"""A threshold autoscaler (busy share > 80% -> +1 worker, < 30% -> -1), the baseline DS2 is compared to.

This is what HPA-on-CPU or Dhalion's rules do: look at how busy the workers are and take one
speculative step. Same interface, warm-up and policy interval as :class:`PoolController`, so the
benchmark changes only the decision rule.
"""

from __future__ import annotations

from cadenza.scaling.controller import (
    Action,
    ControllerSettings,
    PacedController,
    PoolDecision,
    RateWindow,
)
from cadenza.scheduling.clock import Clock

__all__ = ["ThresholdController", "busy_share"]


def busy_share(window: RateWindow, workers: int) -> float:
    """Mean share of wall time the workers spent on useful work in the window.

    An instance's busy share on a sub-topology is observed / true processing rate (records per wall
    second over records per busy second); a worker's is the sum over the sub-topologies it runs.
    """
    if workers <= 0:
        raise ValueError(f"workers must be positive, got {workers!r}")
    has_upstream = {down for _, down in window.edges}
    total = 0.0
    for name, instances in window.rates.items():
        if name not in has_upstream:
            continue
        for rate in instances:
            if rate.true_processing > 0:
                total += rate.observed_processing / rate.true_processing
    return total / workers


class ThresholdController(PacedController):
    """+1 worker above ``high``, -1 below ``low`` of mean busy share, within min/max."""

    def __init__(
        self, settings: ControllerSettings, clock: Clock, workers: int, *, high: float = 0.8, low: float = 0.3
    ) -> None:
        if not 0 <= low < high:
            raise ValueError(f"thresholds must satisfy 0 <= low < high, got low={low!r}, high={high!r}")
        super().__init__(settings, clock, workers)
        self.high = high
        self.low = low

    def evaluate(self, window: RateWindow) -> PoolDecision:
        now = self._clock.now()
        s = self._settings
        current = self._workers
        paced = self._paced(now)
        if paced is not None:
            return PoolDecision(now, paced[0], current, current, None, paced[1])
        share = busy_share(window, current)
        if share > self.high:
            proposed = min(current + 1, s.max_workers)
        elif share < self.low:
            proposed = max(current - 1, s.min_workers)
        else:
            proposed = current
        action: Action = "hold"
        if proposed != current:
            action = "scale_up" if proposed > current else "scale_down"
            self._workers = proposed
            self._reconfigured_at = now
        return PoolDecision(now, action, current, proposed, proposed, f"busy share {share:.2f}")
