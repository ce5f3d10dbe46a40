"""HopEstimates: each hop's estimate is the quantile of the records of its last window, refreshed on an
interval of an injected clock, checked against a brute force that keeps every observation."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cadenza.errors import ConfigError
from cadenza.infra.metrics.names import LATENCY_BUCKETS
from cadenza.infra.metrics.prometheus import LatencyHistogram
from cadenza.infra.metrics.quantiles import histogram_quantile
from cadenza.scheduling.clock import VirtualClock
from cadenza.scheduling.costs import CostModel
from cadenza.worker.tuning.hop_estimates import HopEstimates

DAG = {"source": ["window"], "window": []}


def model() -> CostModel:
    costs = CostModel()
    costs.add_pipeline("p", DAG)
    costs.set_estimate("p", "source", 0.001)
    costs.set_estimate("p", "window", 0.002)
    return costs


def cumulative(values: list[float]) -> dict[float, float]:
    buckets = {bound: float(sum(1 for v in values if v <= bound)) for bound in LATENCY_BUCKETS}
    buckets[math.inf] = float(len(values))
    return buckets


@dataclass
class BruteForce:
    """Every observation, grouped by the refresh that first saw it; the estimate recomputed from them."""

    quantile: float
    keep: int
    min_count: int
    batches: list[list[float]] = field(default_factory=lambda: [[]])
    estimate: float = 0.0

    def observe(self, value: float) -> None:
        self.batches[-1].append(value)

    def refreshed(self) -> None:
        # The newest ``keep`` snapshots are kept; the window is what came after the oldest of them.
        done = len(self.batches) - 1  # refreshes before this one
        first = max(0, done - (self.keep - 1)) + 1
        window = [v for batch in self.batches[first:] for v in batch]
        if len(window) >= self.min_count:
            value = histogram_quantile(self.quantile, cumulative(window))
            assert value is not None
            self.estimate = value
        self.batches.append([])


steps = st.lists(
    st.one_of(
        st.tuples(st.just("observe"), st.floats(0.0, 400.0, allow_nan=False), st.integers(1, 30)),
        st.tuples(st.just("advance"), st.floats(0.0, 3.0, allow_nan=False), st.just(0)),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(steps, st.sampled_from([0.5, 0.9, 0.99]), st.sampled_from([(1.0, 1.0), (1.0, 3.0), (0.5, 2.0)]))
def test_each_estimate_is_the_quantile_of_the_records_in_its_window(
    script: list[tuple[str, float, int]], quantile: float, interval_window: tuple[float, float]
) -> None:
    interval, window = interval_window
    clock = VirtualClock(100.0)
    costs = model()
    histogram = LatencyHistogram(LATENCY_BUCKETS)
    hops = HopEstimates(
        costs, [("p", "window", histogram)], clock.now, quantile=quantile, window=window, interval=interval
    )
    brute = BruteForce(quantile, keep=math.ceil(window / interval) + 1, min_count=20)
    due = clock.now()
    for action, amount, count in script:
        if action == "observe":
            histogram.observe_many(amount, count)
            for _ in range(count):
                brute.observe(amount)
        else:
            clock.advance(amount)
        refreshed = hops.refresh()
        assert refreshed == (clock.now() >= due)
        if refreshed:
            due = clock.now() + interval
            brute.refreshed()
        assert costs.hop("p", "window") == brute.estimate
        assert costs.path_cost("p", "source") == 0.001 + (brute.estimate + 0.002)


def test_a_burst_of_slow_hops_is_forgotten_once_it_leaves_the_window() -> None:
    clock = VirtualClock(0.0)
    costs = model()
    histogram = LatencyHistogram(LATENCY_BUCKETS)
    hops = HopEstimates(
        costs, [("p", "window", histogram)], clock.now, quantile=0.5, window=2.0, interval=1.0
    )
    assert hops.refresh()  # the baseline
    histogram.observe_many(0.8, 30)  # a slow second...
    clock.advance(1.0)
    assert hops.refresh()
    slow = costs.hop("p", "window")
    assert 0.5 < slow <= 1.0  # in 0.8's bucket
    assert costs.path_cost("p", "source") == 0.001 + (slow + 0.002)
    for _ in range(2):  # ... then fast ones, until the slow second is out of the window
        histogram.observe_many(0.02, 30)
        clock.advance(1.0)
        assert hops.refresh()
    assert 0.01 < costs.hop("p", "window") <= 0.025


def test_too_few_records_keep_the_last_estimate() -> None:
    clock = VirtualClock(0.0)
    costs = model()
    histogram = LatencyHistogram(LATENCY_BUCKETS)
    hops = HopEstimates(costs, [("p", "window", histogram)], clock.now, window=1.0, interval=1.0, min_count=5)
    hops.refresh()
    histogram.observe_many(0.2, 5)
    clock.advance(1.0)
    hops.refresh()
    estimate = costs.hop("p", "window")
    assert 0.1 < estimate <= 0.25
    histogram.observe_many(0.002, 4)  # fewer than min_count: no news about the tail
    clock.advance(1.0)
    hops.refresh()
    assert costs.hop("p", "window") == estimate


def test_quantile_zero_leaves_hops_out_and_a_hop_given_twice_is_kept_once() -> None:
    clock = VirtualClock(0.0)
    costs = model()
    histogram = LatencyHistogram(LATENCY_BUCKETS)
    off = HopEstimates(costs, [("p", "window", histogram)], clock.now, quantile=0.0)
    assert len(off) == 0
    twice = HopEstimates(costs, [("p", "window", histogram), ("p", "window", histogram)], clock.now)
    assert len(twice) == 1
    histogram.observe_many(0.2, 50)
    for hops in (off, twice):
        hops.refresh()
    clock.advance(1.0)
    assert not off.refresh()
    assert costs.hop("p", "window") == 0.0
    assert twice.refresh()
    assert costs.hop("p", "window") == 0.0  # the first refresh was the baseline; nothing since
    histogram.observe_many(0.2, 50)
    clock.advance(1.0)
    twice.refresh()
    assert 0.1 < costs.hop("p", "window") <= 0.25


@pytest.mark.parametrize(
    "kwargs",
    [
        {"quantile": 1.0},
        {"quantile": -0.1},
        {"interval": 0.0},
        {"interval": 2.0, "window": 1.0},
        {"window": math.inf},
        {"min_count": 0},
    ],
)
def test_bad_settings_are_config_errors(kwargs: dict[str, float]) -> None:
    with pytest.raises(ConfigError):
        HopEstimates(model(), [], VirtualClock(0.0).now, **kwargs)  # type: ignore[arg-type]
