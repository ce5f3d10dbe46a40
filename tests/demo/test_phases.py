"""The demo's phases: the order they run in, the sizings, and the verdict pooled over the phases that
ran at the load asked for (pure logic, no broker)."""

from __future__ import annotations

from typing import Any

import pytest

from cadenza.demo.phases import in_run_order, policy_result
from cadenza.demo.s1_config import SIZINGS, S1Config, demo_config, phase_order, quick_config, sized
from cadenza.demo.s1_results import actual_load, tenant_stats
from cadenza.demo.worker_metrics import mean_run_seconds


def test_the_mirrored_order_runs_fifo_cameo_cameo_fifo() -> None:
    config = S1Config(systems=("fifo", "cameo"), order="mirrored", repetitions=2)
    assert phase_order(config) == [("fifo", 0), ("cameo", 0), ("cameo", 1), ("fifo", 1)]
    three = S1Config(systems=("a", "b", "c"), order="mirrored", repetitions=3)
    assert [system for system, _ in phase_order(three)] == list("abccbaabc")


def test_the_rotating_order_starts_each_repetition_one_system_later() -> None:
    config = S1Config(systems=("fifo", "edf", "cameo"), repetitions=3)
    assert [system for system, _ in phase_order(config)] == [
        *("fifo", "edf", "cameo"),
        *("edf", "cameo", "fifo"),
        *("cameo", "fifo", "edf"),
    ]


def test_each_policy_meets_each_input_once_in_the_demo() -> None:
    phases = phase_order(demo_config())
    assert len(phases) == 4
    for system in ("fifo", "cameo"):
        assert sorted(rep for name, rep in phases if name == system) == [0, 1]


def test_a_sizing_sets_its_fields_and_keeps_overrides_on_top() -> None:
    heavy = sized("heavy", load=0.9)
    assert heavy.sizing == "heavy" and heavy.load == 0.9
    assert heavy.ba_cost_ms == 5.0 and heavy.ba_cost_kind == "cpu" and heavy.ls_rate == 100.0
    assert sized("light") == S1Config()
    assert quick_config("heavy").ba_cost_ms == SIZINGS["heavy"]["ba_cost_ms"]
    assert demo_config().sizing == "heavy" and demo_config().order == "mirrored"


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: sized("huge"), "unknown S1 sizing 'huge'"),
        (lambda: S1Config(order="random"), "unknown S1 order 'random'"),
        (lambda: S1Config(ba_cost_kind="wall"), "unknown BA cost kind 'wall'"),
    ],
)
def test_nonsense_configs_are_refused_by_name(build: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build()


def _phase(number: int, ls_met: int, ba_met: int, *, off: bool) -> dict[str, Any]:
    ls = tenant_stats(
        [0.1] * ls_met + [1.0] * (10 - ls_met), expected=10, target=0.3, records=10, seconds=1.0
    )
    ba = tenant_stats([1.0] * ba_met, expected=20, target=5.0, records=ba_met, seconds=1.0)
    load = actual_load(0.75, 100.0, 100.0 / (1.5 if off else 1.0), 100.0)
    assert load["off_load"] is off
    return {"phase": number, "LS": ls, "BA": ba, "load": load}


def test_a_policys_result_pools_its_phases_at_the_load_asked_for() -> None:
    result = policy_result("cameo", [_phase(2, 10, 20, off=False), _phase(3, 9, 19, off=False)])
    assert result.counted == (2, 3) and result.off_load == ()
    assert (result.tenants["LS"].met, result.tenants["LS"].expected) == (19, 20)
    assert (result.tenants["BA"].met, result.tenants["BA"].expected, result.tenants["BA"].results) == (
        39,
        40,
        39,
    )
    assert result.tenants["LS"].verdict() == "MISSED: 95.0% within 300 ms (goal 99%)"
    assert result.tenants["BA"].verdict() == "MISSED: 97.5% within 5,000 ms (goal 99%, 1 missing)"
    assert result.met("LS") is False


def test_an_off_load_phase_is_shown_but_not_counted() -> None:
    result = policy_result("cameo", [_phase(2, 10, 20, off=False), _phase(3, 0, 0, off=True)])
    assert result.counted == (2,) and result.off_load == (3,)
    assert result.tenants["LS"].verdict() == "MET: 100.0% within 300 ms"
    assert result.met("BA") is True
    nothing = policy_result("fifo", [_phase(1, 10, 20, off=True)])
    assert nothing.counted == () and nothing.met("LS") is None


def test_phases_come_back_in_the_order_they_ran() -> None:
    runs = {"fifo": [{"phase": 1}, {"phase": 4}], "cameo": [{"phase": 2}, {"phase": 3}]}
    assert [(system, phase["phase"]) for system, phase in in_run_order(runs)] == [
        ("fifo", 1),
        ("cameo", 2),
        ("cameo", 3),
        ("fifo", 4),
    ]


def test_the_mean_run_time_of_a_tenant_is_its_sum_over_its_count_between_scrapes() -> None:
    def scrape(ba_sum: float, ba_count: int, ls_sum: float, ls_count: int) -> str:
        return "\n".join(
            [
                "# TYPE cadenza_run_time_seconds histogram",
                f'cadenza_run_time_seconds_sum{{tenant="BA",pipeline="p",operator="map"}} {ba_sum}',
                f'cadenza_run_time_seconds_count{{tenant="BA",pipeline="p",operator="map"}} {ba_count}',
                f'cadenza_run_time_seconds_sum{{tenant="LS",pipeline="q",operator="count"}} {ls_sum}',
                f'cadenza_run_time_seconds_count{{tenant="LS",pipeline="q",operator="count"}} {ls_count}',
                "",
            ]
        )

    before, after = scrape(1.0, 100, 0.5, 1000), scrape(1.6, 200, 0.5, 1000)
    assert mean_run_seconds(before, after, "BA") == pytest.approx(0.006)  # 0.6 s over 100 jobs
    assert mean_run_seconds(before, after, "LS") is None  # ran nothing in between
    assert mean_run_seconds("", after, "BA") == pytest.approx(0.008)
