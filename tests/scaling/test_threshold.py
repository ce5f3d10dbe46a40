"""The threshold baseline under a VirtualClock."""

from __future__ import annotations

import pytest

from cadenza.scaling import ControllerSettings, InstanceRates, RateWindow
from cadenza.scaling.threshold import ThresholdController, busy_share
from cadenza.scheduling.clock import VirtualClock


def window(shares: list[float]) -> RateWindow:
    """One sub-topology whose instances were busy the given shares of wall time (capacity 100/s)."""
    return RateWindow(
        operators={"in": 1, "work": len(shares)},
        edges=[("in", "work")],
        rates={
            "in": [InstanceRates(0.0, 0.0)],
            "work": [InstanceRates(100.0, 100.0, 100.0 * s) for s in shares],
        },
        partitions={"work": 8},
        source_rates={"in": 0.0},
    )


def test_busy_share_is_the_mean_over_workers() -> None:
    assert busy_share(window([0.9, 0.5]), 2) == pytest.approx(0.7)
    assert busy_share(window([0.9]), 3) == pytest.approx(0.3)
    with pytest.raises(ValueError, match="workers"):
        busy_share(window([0.5]), 0)


def test_one_step_at_a_time_within_bounds_after_warm_up() -> None:
    clock = VirtualClock(0.0)
    settings = ControllerSettings(min_workers=1, max_workers=3, policy_interval_s=10, warmup_s=20)
    controller = ThresholdController(settings, clock, workers=1)
    clock.advance(10)
    assert controller.evaluate(window([1.0])).action == "warmup"
    clock.advance(10)
    first = controller.evaluate(window([1.0]))
    assert (first.action, first.desired) == ("scale_up", 2)
    clock.advance(20)
    assert controller.evaluate(window([0.95, 0.95])).desired == 3
    clock.advance(20)
    assert controller.evaluate(window([1.0, 1.0, 1.0])).action == "hold"  # at max
    clock.advance(20)
    down = controller.evaluate(window([0.1, 0.1, 0.1]))
    assert (down.action, down.desired) == ("scale_down", 2)
    clock.advance(5)
    assert controller.evaluate(window([0.1, 0.1])).action == "warmup"
    clock.advance(20)
    assert controller.evaluate(window([0.5, 0.5])).action == "hold"


def test_thresholds_must_be_ordered() -> None:
    with pytest.raises(ValueError, match="low < high"):
        ThresholdController(ControllerSettings(), VirtualClock(), 1, high=0.3, low=0.8)
