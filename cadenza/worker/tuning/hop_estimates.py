"""The repartition hops a worker plans with: a recent quantile of each one's measured latency.

A record upstream of a repartition topic reaches its window only after a produce, the broker and a
fetch (tens of milliseconds at the median, hundreds at the tail on a busy broker). A start deadline
that leaves that out lets the scheduler run the record just in time for an operator that is itself
still a hop away, and the result is late by the hop. The worker already measures each hop where it
reads the topic (``cadenza_repartition_hop_seconds``); this keeps a quantile of the last
``window`` seconds of it in the cost model (:meth:`CostModel.set_hop`), so the operators upstream
get it in their path costs.

Why a quantile of a sliding window, not an EWMA of each record: a deadline that holds for 99% of
records needs the hop's tail, not its mean, and the tail moves with the broker's load, which an
all-time histogram would forget only slowly. The window is taken from snapshots of the histogram's
bucket counts, once per ``interval``, off the per-record path (the histogram is counted anyway).

A hop measured with fewer than ``min_count`` records in the window keeps its last estimate: a
pipeline gone quiet has no news about the broker, and a handful of records says little about a
tail. The estimate is what the histogram can tell (Prometheus' interpolation inside a bucket, see
:mod:`cadenza.infra.metrics.quantiles`), so it is as coarse as its buckets.

Only hops this worker reads are measured. A worker that writes a repartition topic that another
worker reads plans with no hop for it (0), as before.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from cadenza.errors import ConfigError
from cadenza.infra.metrics.prometheus import LatencyHistogram
from cadenza.infra.metrics.quantiles import Buckets, bucket_delta, histogram_quantile
from cadenza.scheduling.costs import CostModel

__all__ = ["DEFAULT_HOP_QUANTILE", "HopEstimates", "check_hop_quantile"]

DEFAULT_HOP_QUANTILE = 0.99
"""The quantile of a hop a deadline counts: the target is met for 99% of results."""


def check_hop_quantile(quantile: float) -> None:
    """Refuse a quantile no hop can be planned at (the worker checks it when it is built, before
    it has any hop to plan)."""
    if not (0.0 <= quantile < 1.0):
        raise ConfigError(f"hop_quantile must be in [0, 1), got {quantile!r}")


@dataclass(slots=True)
class _Hop:
    pipeline: str
    operator: str
    histogram: LatencyHistogram
    #: Cumulative bucket counts at each of the last refreshes, oldest first.
    snapshots: deque[Buckets] = field(default_factory=deque)


class HopEstimates:
    """Refreshes each hop's estimate in ``cost_model`` every ``interval`` seconds of ``now()``.

    ``hops`` are ``(pipeline, operator reading the repartition topic, its hop histogram)``; a pair
    given twice is kept once. ``quantile`` 0 turns hops off: nothing is ever set.
    """

    __slots__ = ("_due", "_hops", "_keep", "_min_count", "_model", "_now", "interval", "quantile")

    def __init__(
        self,
        cost_model: CostModel,
        hops: Iterable[tuple[str, str, LatencyHistogram]],
        now: Callable[[], float],
        *,
        quantile: float = DEFAULT_HOP_QUANTILE,
        window: float = 10.0,
        interval: float = 1.0,
        min_count: int = 20,
    ) -> None:
        check_hop_quantile(quantile)
        if not (0.0 < interval <= window < math.inf):
            raise ConfigError(
                f"hop estimates need 0 < interval <= window, finite, got interval {interval!r} "
                f"and window {window!r}"
            )
        if min_count < 1:
            raise ConfigError(f"min_count must be at least 1, got {min_count!r}")
        self._model = cost_model
        self._now = now
        self.quantile = quantile
        self.interval = interval
        self._min_count = min_count
        # Snapshots kept: the newest and enough older ones to reach ``window`` back.
        self._keep = math.ceil(window / interval) + 1
        unique: dict[tuple[str, str], _Hop] = {}
        for pipeline, operator, histogram in hops:
            unique.setdefault((pipeline, operator), _Hop(pipeline, operator, histogram))
        self._hops = tuple(unique.values()) if quantile > 0.0 else ()
        self._due = now()

    def __len__(self) -> int:
        return len(self._hops)

    def refresh(self) -> bool:
        """Snapshot the histograms and set each estimate, if an ``interval`` has passed; whether it did.

        One clock read and a comparison when not due, so it can run every loop round.
        """
        now = self._now()
        if now < self._due or not self._hops:
            return False
        self._due = now + self.interval
        for hop in self._hops:
            snapshots = hop.snapshots
            snapshots.append(hop.histogram.buckets())
            if len(snapshots) > self._keep:
                snapshots.popleft()
            value = self._estimate(bucket_delta(snapshots[-1], snapshots[0]))
            if value is not None:
                self._model.set_hop(hop.pipeline, hop.operator, value)
        return True

    def _estimate(self, observed: Buckets) -> float | None:
        """The quantile of the observations between two snapshots, or None if too few."""
        if observed[math.inf] < self._min_count:
            return None
        return histogram_quantile(self.quantile, observed)
