"""Trace sampling: deterministic per trace id, accurate in ratio, nested across ratios."""

from __future__ import annotations

import random

import pytest

from cadenza.infra.metrics.sampling import is_sampled, sample_threshold, trace_hash


def test_the_decision_depends_only_on_trace_id_and_ratio() -> None:
    rng = random.Random(7)
    ids = [rng.getrandbits(64) for _ in range(2000)]
    first = [is_sampled(t, 0.3) for t in ids]
    assert [is_sampled(t, 0.3) for t in ids] == first
    # A fixed point of the hash, so another implementation can check itself against this one.
    assert trace_hash(1) == 0x9E3779B97F4A7C15
    assert trace_hash(0) == 0


@pytest.mark.parametrize("ratio", [0.01, 0.1, 0.25, 0.5, 0.9])
def test_ratio_holds_for_random_and_sequential_ids(ratio: float) -> None:
    rng = random.Random(11)
    n = 20_000
    random_kept = sum(is_sampled(rng.getrandbits(64), ratio) for _ in range(n))
    sequential_kept = sum(is_sampled(i, ratio) for i in range(n))
    # Random ids: binomial, so 5 standard deviations. Sequential ids are spread evenly by the
    # Fibonacci hash, so they land much closer than that.
    tolerance = 5 * (n * ratio * (1 - ratio)) ** 0.5
    assert abs(random_kept - n * ratio) < tolerance
    assert abs(sequential_kept - n * ratio) < max(5, n * 0.002)


def test_extreme_ratios() -> None:
    ids = [0, 1, 2**63, 2**64 - 1, 12345]
    assert all(is_sampled(t, 1.0) for t in ids)
    assert not any(is_sampled(t, 0.0) for t in ids)
    assert sample_threshold(1.0) == 2**64
    assert sample_threshold(0.0) == 0


def test_kept_traces_at_a_ratio_are_kept_at_every_larger_ratio() -> None:
    ids = range(5000)
    small = {t for t in ids if is_sampled(t, 0.05)}
    large = {t for t in ids if is_sampled(t, 0.2)}
    assert small < large


def test_signed_and_unsigned_forms_of_an_id_agree() -> None:
    for unsigned in (2**63, 2**64 - 1, 2**63 + 12345):
        assert trace_hash(unsigned - 2**64) == trace_hash(unsigned)


@pytest.mark.parametrize("ratio", [-0.1, 1.5, float("nan"), True, "0.5"])
def test_bad_ratios_are_refused(ratio: object) -> None:
    with pytest.raises(ValueError, match="sampling ratio"):
        sample_threshold(ratio)  # type: ignore[arg-type]
