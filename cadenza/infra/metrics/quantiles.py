"""Quantiles and deltas of cumulative Prometheus histograms, as ``histogram_quantile`` computes them.

The dashboard's p50/p99 must agree with what Grafana shows for the same window, and the hop a worker
plans with (:mod:`cadenza.worker.tuning.hop_estimates`) with what its dashboard shows, so the estimate is
Prometheus' own: find the bucket holding the rank and interpolate linearly inside it; a rank in the
``+Inf`` bucket is reported as the largest finite bound (the histogram cannot say more).

Beside it, two coarser readings the S1 harness reports: the upper bound of the bucket holding a
quantile (:func:`bucket_bound`), and the nearest-rank quantile of raw values (:func:`sample_quantile`),
for latencies measured one by one rather than counted into buckets.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["Buckets", "bucket_bound", "bucket_delta", "histogram_quantile", "sample_quantile"]

Buckets = dict[float, float]
"""Cumulative counts by upper bound (``le``), ``+Inf`` included."""


def histogram_quantile(q: float, buckets: Buckets) -> float | None:
    """The ``q`` quantile (0..1) of ``buckets``; ``None`` without observations or without a
    ``+Inf`` bucket (a histogram that lost its total)."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"a quantile is between 0 and 1, got {q!r}")
    bounds = sorted(buckets)
    if not bounds or bounds[-1] != math.inf:
        return None
    total = buckets[math.inf]
    if total <= 0:
        return None
    rank = q * total
    lower, below = 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank and count > below:
            if bound == math.inf:
                return lower if len(bounds) > 1 else None
            return lower + (bound - lower) * (rank - below) / (count - below)
        lower, below = bound, count
    return lower  # only reached through non-monotonic input; the last finite bound is the best guess


def bucket_delta(now: Buckets, before: Buckets) -> Buckets:
    """Observations between two scrapes of one series. A total that went down means the worker
    restarted (its counters began at zero again), so everything it has now is new."""
    if now.get(math.inf, 0.0) < before.get(math.inf, 0.0):
        return dict(now)
    return {bound: max(0.0, count - before.get(bound, 0.0)) for bound, count in now.items()}


def bucket_bound(q: float, buckets: Buckets) -> float | None:
    """The upper bound of the bucket holding the ``q`` quantile of ``buckets``: what the histogram
    says for certain (the quantile is at most that); ``None`` without observations or where the
    quantile is in the ``+Inf`` bucket."""
    bounds = sorted(buckets)
    total = buckets[bounds[-1]] if bounds else 0.0
    for bound in bounds:
        if total and buckets[bound] >= q * total:
            return None if math.isinf(bound) else bound
    return None


def sample_quantile(values: Sequence[float], q: float) -> float | None:
    """The nearest-rank ``q`` quantile of ``values`` (one of them, none interpolated); ``None`` if empty."""
    if not values:
        return None
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))
    return ordered[index]
