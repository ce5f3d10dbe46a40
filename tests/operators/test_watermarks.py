"""WatermarkTracker: minimum across partitions, idleness, monotonicity, lateness."""

from __future__ import annotations

import math
from collections.abc import Hashable
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

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


class _BruteForceTracker:
    """The tracker's rule as a full pass over every partition at every question (what
    ``WatermarkTracker`` did before it kept the result of its last pass)."""

    def __init__(self, partitions: list[int], ooo: float, timeout: float | None, clock: FakeClock) -> None:
        self.ooo, self.timeout, self.clock = ooo, timeout, clock
        # partition -> [largest event time, last active, idle, timed out]
        self.parts: dict[int, list[Any]] = {p: [-math.inf, clock.now, False, False] for p in partitions}
        self.current = -math.inf
        self.fired: list[Hashable] = []

    def observe(self, p: int, t: float) -> None:
        part = self.parts.setdefault(p, [-math.inf, 0.0, False, False])
        part[0] = max(part[0], t)
        part[2] = part[3] = False
        if self.timeout is not None:
            part[1] = self.clock.now

    def heard(self, p: int) -> None:
        part = self.parts.get(p)
        if part is not None:
            part[2] = part[3] = False
            if self.timeout is not None:
                part[1] = self.clock.now

    def watermark(self) -> float:
        now = self.clock.now if self.timeout is not None else 0.0
        lowest = lowest_delivered = math.inf
        for p, part in self.parts.items():
            timed = self.timeout is not None and now - part[1] >= self.timeout
            if part[2] or timed:
                if not part[2] and not part[3]:
                    part[3] = True
                    self.fired.append(p)
                if part[0] != -math.inf:
                    lowest_delivered = min(lowest_delivered, part[0])
                continue
            lowest = min(lowest, part[0])
        if lowest == math.inf:
            lowest = lowest_delivered
        if lowest != math.inf:
            self.current = max(self.current, lowest - self.ooo)
        return self.current


_OPERATION = st.one_of(
    st.tuples(st.just("observe"), st.integers(0, 4), st.floats(0.0, 50.0)),
    st.tuples(st.just("heard"), st.integers(0, 4), st.just(0.0)),
    st.tuples(st.just("idle"), st.integers(0, 4), st.just(0.0)),
    st.tuples(st.just("add"), st.integers(0, 5), st.just(0.0)),
    st.tuples(st.just("remove"), st.integers(0, 5), st.just(0.0)),
    st.tuples(st.just("wait"), st.just(0), st.sampled_from([0.5, 2.0, 5.0, 9.999999, 10.0, 10.000001])),
)


@settings(max_examples=300, deadline=None)
@example(  # the only partition, marked idle, comes back without a record, then goes silent
    inputs=1,
    timeout=10.0,
    operations=[
        (("observe", 0, 5.0), True),
        (("idle", 0, 0.0), True),
        (("heard", 0, 0.0), True),
        (("wait", 0, 10.0), True),
    ],
)
@given(
    inputs=st.integers(1, 4),
    timeout=st.sampled_from([None, 10.0]),
    operations=st.lists(st.tuples(_OPERATION, st.booleans()), max_size=60),
)
def test_the_watermark_is_what_a_full_pass_over_the_partitions_finds_whenever_it_is_asked(
    inputs: int, timeout: float | None, operations: list[tuple[tuple[str, int, float], bool]]
) -> None:
    clock = FakeClock()
    fired: list[Hashable] = []
    tracker = WatermarkTracker(
        range(inputs), max_out_of_orderness=1.0, idle_timeout=timeout, clock=clock, on_idle=fired.append
    )
    brute = _BruteForceTracker(list(range(inputs)), 1.0, timeout, clock)
    for (operation, partition, value), ask in operations:
        if operation == "observe":
            tracker.observe(partition, value)
            brute.observe(partition, value)
        elif operation == "heard":
            tracker.heard(partition)
            brute.heard(partition)
        elif operation == "idle":
            tracker.mark_idle(partition)
            if partition in brute.parts:
                brute.parts[partition][2] = True
        elif operation == "add":
            tracker.add_partition(partition)
            brute.parts.setdefault(partition, [-math.inf, clock.now, False, False])
        elif operation == "remove":
            tracker.remove_partition(partition)
            brute.parts.pop(partition, None)
        else:
            clock.now += value
        if ask:  # the idle timeouts fire when the watermark is asked for, in both
            assert tracker.watermark() == brute.watermark()
            assert fired == brute.fired
    assert tracker.watermark() == brute.watermark()
    assert fired == brute.fired
