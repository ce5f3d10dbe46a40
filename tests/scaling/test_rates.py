"""True and observed rates differenced from cumulative counters, under a VirtualClock."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cadenza.scaling import InstanceRates, RateSample, TrueRateMeter, window_rates
from cadenza.scheduling.clock import VirtualClock


def test_rates_are_deltas_over_busy_and_wall_time() -> None:
    rates = window_rates(RateSample(100, 50, 1.0), RateSample(300, 450, 2.0), wall_s=4.0)
    assert rates == InstanceRates(200.0, 400.0, 50.0, 100.0)


def test_a_counter_going_back_is_a_restart() -> None:
    rates = window_rates(RateSample(100, 50, 1.0), RateSample(30, 10, 0.5), wall_s=2.0)
    assert rates == InstanceRates(60.0, 20.0, 15.0, 5.0)
    assert window_rates(None, RateSample(30, 10, 0.5), wall_s=2.0) == rates


def test_no_busy_time_gives_zero_true_rates() -> None:
    assert window_rates(RateSample(5, 5, 1.0), RateSample(5, 5, 1.0), 1.0) == InstanceRates(0.0, 0.0)


def test_a_window_must_last() -> None:
    with pytest.raises(ValueError, match="positive time"):
        window_rates(None, RateSample(1, 1, 1.0), 0.0)
    with pytest.raises(ValueError, match="window_s"):
        TrueRateMeter(VirtualClock(), dict, 0.0)


@given(
    st.lists(
        st.tuples(
            st.floats(0.1, 30.0),  # seconds until the next read
            st.integers(0, 1000),  # records processed meanwhile
            st.integers(0, 1000),  # records produced meanwhile
            st.floats(0.0, 5.0),  # busy seconds meanwhile
        ),
        min_size=1,
        max_size=30,
    ),
    st.floats(1.0, 20.0),
)
def test_meter_windows_match_a_brute_force(
    steps: list[tuple[float, int, int, float]], window_s: float
) -> None:
    clock = VirtualClock(100.0)
    totals = {"processed": 0, "produced": 0, "busy": 0.0}
    meter = TrueRateMeter(
        clock,
        lambda: {"s": RateSample(totals["processed"], totals["produced"], totals["busy"])},  # type: ignore[arg-type]
        window_s,
    )
    # (time, processed, produced, busy) when the current window opened
    opened: tuple[float, float, float, float] = (clock.now(), 0, 0, 0.0)
    expected: dict[str, InstanceRates] = {}
    for seconds, processed, produced, busy in steps:
        clock.advance(seconds)
        totals["processed"] += processed
        totals["produced"] += produced
        totals["busy"] += busy
        now: tuple[float, float, float, float] = (
            clock.now(),
            totals["processed"],
            totals["produced"],
            totals["busy"],
        )
        if now[0] - opened[0] >= window_s:
            wall = now[0] - opened[0]
            d_busy = now[3] - opened[3]
            d_proc, d_prod = now[1] - opened[1], now[2] - opened[2]
            expected = {
                "s": InstanceRates(
                    d_proc / d_busy if d_busy > 0 else 0.0,
                    d_prod / d_busy if d_busy > 0 else 0.0,
                    d_proc / wall,
                    d_prod / wall,
                )
            }
            opened = now
        got = meter.rates()
        assert got.keys() == expected.keys()
        for key, rate in expected.items():
            fields = ("true_processing", "true_output", "observed_processing", "observed_output")
            assert [getattr(got[key], f) for f in fields] == pytest.approx([getattr(rate, f) for f in fields])
