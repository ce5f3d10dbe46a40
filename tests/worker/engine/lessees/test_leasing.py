"""The lease rules, exactly: slack, the floor and cap, the lease gap and the idle release."""

from __future__ import annotations

import math

import pytest

from cadenza.worker.engine.lessees.leasing import LeaseRules, Leasing, slack


def test_slack_spreads_the_work_ahead_over_the_lessees_and_the_lessor_counts_as_one() -> None:
    assert slack(10.0, 4.0, 0.5, 8, 0) == pytest.approx(2.0)  # 10 - 4 - 0.5 * 8 / 1
    assert slack(10.0, 4.0, 0.5, 8, 4) == pytest.approx(5.0)  # 10 - 4 - 0.5 * 8 / 4


def test_auto_leases_only_on_negative_slack_and_at_most_one_per_gap() -> None:
    leasing = Leasing(LeaseRules(floor=0, cap=3, lease_gap=0.05))
    assert not leasing.should_lease(0.0, 0, slack=0.001, needs_one=False, free=True)
    assert leasing.should_lease(0.0, 0, slack=-0.001, needs_one=False, free=True)
    leasing.leased(0.0)
    assert not leasing.should_lease(0.04, 1, slack=-1.0, needs_one=False, free=True)
    assert leasing.should_lease(0.05, 1, slack=-1.0, needs_one=False, free=True)
    assert not leasing.should_lease(1.0, 3, slack=-1.0, needs_one=False, free=True)  # the cap
    assert not leasing.should_lease(1.0, 1, slack=-1.0, needs_one=False, free=False)  # no core free


def test_a_step_that_cannot_run_on_the_lessor_leases_its_first_lessee_at_once() -> None:
    leasing = Leasing(LeaseRules(floor=0, cap=2))
    assert leasing.should_lease(0.0, 0, slack=math.inf, needs_one=True, free=True)
    assert not leasing.should_lease(0.0, 1, slack=math.inf, needs_one=True, free=True)


def test_a_fixed_count_is_leased_up_to_and_never_released() -> None:
    leasing = Leasing(LeaseRules(floor=2, cap=2, idle_release=1.0))
    assert leasing.should_lease(0.0, 0, slack=math.inf, needs_one=False, free=True)
    assert leasing.should_lease(0.0, 1, slack=math.inf, needs_one=False, free=True)
    assert not leasing.should_lease(0.0, 2, slack=-5.0, needs_one=False, free=True)
    assert not leasing.should_release(100.0, 2, idle_since=0.0)


def test_release_waits_for_the_idle_time_counted_from_the_last_lease_or_release() -> None:
    leasing = Leasing(LeaseRules(floor=0, cap=4, idle_release=2.0))
    leasing.leased(10.0)
    assert not leasing.should_release(11.9, 2, idle_since=5.0)  # idle long, but leased at 10
    assert leasing.should_release(12.0, 2, idle_since=5.0)
    leasing.released(12.0)
    assert not leasing.should_release(13.0, 1, idle_since=5.0)  # one release per idle period
    assert leasing.should_release(14.0, 1, idle_since=5.0)


def test_a_load_that_stays_negative_then_stops_leases_and_releases_once_each_no_flapping() -> None:
    """A burst (slack negative while work is queued), then quiet: the lessee stays leased through the
    burst's short gaps and goes once, after the idle time."""
    leasing = Leasing(LeaseRules(floor=0, cap=1, idle_release=2.0, lease_gap=0.05))
    lessees = 0
    idle_since = 0.0
    for tick in range(1000):  # 10 s in 10 ms ticks: busy for 5 s with 100 ms gaps each 0.5 s
        now = tick * 0.01
        busy = now < 5.0 and (now % 0.5) < 0.4
        if busy:
            idle_since = now
            if leasing.should_lease(now, lessees, slack=-0.1, needs_one=False, free=True):
                leasing.leased(now)
                lessees += 1
        elif lessees and leasing.should_release(now, lessees, idle_since):
            leasing.released(now)
            lessees -= 1
    assert (leasing.leases, leasing.releases) == (1, 1)


def test_rules_that_make_no_range_are_refused() -> None:
    with pytest.raises(ValueError, match="range"):
        Leasing(LeaseRules(floor=3, cap=2))
