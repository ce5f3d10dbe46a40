"""WatermarkTracker: minimum across partitions, idleness, monotonicity, lateness."""

from __future__ import annotations

import math

import pytest

from cadenza.errors import ConfigError
from cadenza.operators import WatermarkTracker


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_watermark_is_minimum_across_partitions_minus_out_of_orderness() -> None:
    tracker = WatermarkTracker([0, 1], max_out_of_orderness="2s")
    tracker.observe(0, 100)
    assert tracker.watermark() == -math.inf  # partition 1 has not delivered yet
    tracker.observe(1, 50)
    assert tracker.watermark() == 48
    tracker.observe(1, 40)  # out of order: the partition's maximum stays 50
    assert tracker.watermark() == 48
    tracker.observe(1, 120)
    assert tracker.watermark() == 98


def test_mark_idle_releases_a_partition_until_it_delivers_again() -> None:
    tracker = WatermarkTracker([0, 1, 2])
    tracker.observe(0, 10)
    tracker.observe(1, 20)
    tracker.mark_idle(2)
    assert tracker.is_idle(2)
    assert tracker.watermark() == 10
    tracker.mark_idle(0)
    assert tracker.watermark() == 20
    tracker.observe(0, 15)  # rejoins behind the watermark: the watermark does not go back
    assert not tracker.is_idle(0)
    assert tracker.watermark() == 20
    tracker.observe(2, 30)
    tracker.observe(0, 40)
    assert tracker.watermark() == 20
    tracker.observe(1, 35)
    assert tracker.watermark() == 30


def test_idle_timeout_uses_physical_time() -> None:
    clock = FakeClock()
    tracker = WatermarkTracker([0, 1], idle_timeout="5s", clock=clock)
    tracker.observe(0, 10)
    assert tracker.watermark() == -math.inf
    clock.now += 4.9
    assert tracker.watermark() == -math.inf
    clock.now += 0.1  # partition 1 silent for exactly the timeout since assignment
    assert tracker.watermark() == 10
    clock.now += 5  # now partition 0 is idle too: the watermark stays where it was
    assert tracker.watermark() == 10
    tracker.observe(1, 50)
    assert tracker.watermark() == 50
    tracker.observe(0, 60)
    assert tracker.watermark() == 50


def test_all_partitions_idle_or_none_keeps_the_watermark() -> None:
    assert WatermarkTracker().watermark() == -math.inf
    tracker = WatermarkTracker([0])
    tracker.observe(0, 10)
    tracker.mark_idle(0)
    assert tracker.watermark() == 10


def test_partitions_come_and_go_with_rebalances() -> None:
    tracker = WatermarkTracker([0])
    tracker.observe(0, 10)
    assert tracker.watermark() == 10
    tracker.add_partition(1)
    assert tracker.watermark() == 10  # never backwards, though partition 1 now holds it
    tracker.observe(0, 30)
    assert tracker.watermark() == 10
    tracker.remove_partition(1)
    assert tracker.watermark() == 30
    tracker.observe(7, 40)  # an unknown partition joins on its first record
    assert tracker.partitions == [0, 7]
    assert tracker.watermark() == 30


def test_is_late_boundary_is_inclusive() -> None:
    tracker = WatermarkTracker([0])
    tracker.observe(0, 12)
    assert tracker.is_late(10, allowed_lateness=2)  # 10 + 2 <= 12
    assert not tracker.is_late(10, allowed_lateness=2.25)
    assert not tracker.is_late(12.25)
    assert tracker.is_late(12)


def test_bad_durations_are_config_errors() -> None:
    with pytest.raises(ConfigError):
        WatermarkTracker(max_out_of_orderness="-1s")
    with pytest.raises(ConfigError):
        WatermarkTracker(idle_timeout="whenever")
