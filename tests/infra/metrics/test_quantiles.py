"""The dashboard's quantiles against the exact sample quantile, and bucket deltas against recounting."""

from __future__ import annotations

import math
from bisect import bisect_left

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from cadenza.infra.metrics.names import LATENCY_BUCKETS
from cadenza.infra.metrics.quantiles import bucket_delta, histogram_quantile

BOUNDS = LATENCY_BUCKETS
observations = st.lists(st.floats(min_value=0.0, max_value=400.0, allow_nan=False), min_size=1, max_size=300)


def cumulative(values: list[float]) -> dict[float, float]:
    """Brute force: for each bound, how many values are <= it (Prometheus' ``le``)."""
    buckets = {bound: float(sum(1 for v in values if v <= bound)) for bound in BOUNDS}
    buckets[math.inf] = float(len(values))
    return buckets


@given(observations, st.sampled_from([0.5, 0.9, 0.99, 1.0]))
def test_the_estimate_lies_in_the_bucket_of_the_exact_quantile(values: list[float], q: float) -> None:
    estimate = histogram_quantile(q, cumulative(values))
    exact = sorted(values)[math.ceil(q * len(values)) - 1]  # the ceil(q n)-th smallest
    assert estimate is not None
    if exact > BOUNDS[-1]:
        assert estimate == BOUNDS[-1]  # the +Inf bucket says no more than "above the last bound"
    else:
        bucket = bisect_left(BOUNDS, exact)
        lower = 0.0 if bucket == 0 else BOUNDS[bucket - 1]
        assert lower <= estimate <= BOUNDS[bucket]


@given(observations, observations)
def test_a_delta_counts_what_was_observed_in_between(first: list[float], then: list[float]) -> None:
    assert bucket_delta(cumulative(first + then), cumulative(first)) == cumulative(then)


@given(observations, observations)
def test_after_a_restart_everything_counted_is_new(before: list[float], after: list[float]) -> None:
    assume(len(after) < len(before))
    assert bucket_delta(cumulative(after), cumulative(before)) == cumulative(after)


def test_no_observations_no_quantile() -> None:
    assert histogram_quantile(0.99, {}) is None
    assert histogram_quantile(0.99, {0.1: 0.0, math.inf: 0.0}) is None
    assert histogram_quantile(0.5, {0.1: 3.0}) is None  # no +Inf bucket: not a whole histogram
    with pytest.raises(ValueError, match="between 0 and 1"):
        histogram_quantile(1.5, {math.inf: 1.0})
