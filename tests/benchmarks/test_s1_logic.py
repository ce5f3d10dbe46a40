"""The pure parts of S1: the seeded input plan, what a run must produce, and how runs are summarised."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from cadenza.demo.s1 import (
    Expectations,
    Output,
    S1Config,
    Send,
    expectations,
    format_table,
    measure,
    median_run,
    percentile,
    plan,
    quick_config,
    tenant_stats,
)


def test_the_plan_is_seeded_ordered_and_keeps_the_mean_rates() -> None:
    config = S1Config(ls_rate=200.0)
    first = plan(config, 500.0, 30.0, bursts=True, seed=3)
    assert first == plan(config, 500.0, 30.0, bursts=True, seed=3)  # same seed, same input
    assert first != plan(config, 500.0, 30.0, bursts=True, seed=4)
    assert [s.at for s in first] == sorted(s.at for s in first)
    assert all(0.0 <= s.at < 30.0 for s in first)
    ls = [s for s in first if s.tenant == "LS"]
    ba = [s for s in first if s.tenant == "BA"]
    assert len(ls) == 200 * 30
    # Pareto bursts: the mean rate holds only on average; a 30 s plan lands within a factor of it.
    assert 0.4 * 500 * 30 <= len(ba) <= 2.0 * 500 * 30
    assert len({s.value["id"] for s in ba}) == len(ba)


def test_bursts_exceed_the_mean_rate_inside_a_burst() -> None:
    config = S1Config(burst_peak=4.0)
    ba = [s.at for s in plan(config, 400.0, 30.0, bursts=True, seed=1) if s.tenant == "BA"]
    busiest = max(sum(1 for t in ba if second <= t < second + 1) for second in range(30))
    assert busiest >= 2 * 400  # bursts reach several times the mean rate
    steady = [s.at for s in plan(config, 400.0, 10.0, bursts=False, seed=1) if s.tenant == "BA"]
    assert len(steady) == 4000


def test_expectations_count_full_windows_inside_the_phase_and_every_job() -> None:
    stamped = [
        (Send(0.0, "LS", "u1", {"user": "u1", "page": "/a"}), 99.5),  # before the phase: ignored
        (Send(0.0, "LS", "u1", {"user": "u1", "page": "/a"}), 100.2),
        (Send(0.0, "LS", "u1", {"user": "u1", "page": "/b"}), 100.7),
        (Send(0.0, "LS", "u2", {"user": "u2", "page": "/health"}), 100.8),  # filtered by the pipeline
        (Send(0.0, "LS", "u2", {"user": "u2", "page": "/a"}), 102.5),  # its window closes too late
        (Send(0.0, "BA", "j0", {"id": 0, "payload": "x"}), 101.0),
        (Send(0.0, "BA", "j1", {"id": 1, "payload": "y"}), 103.0),
    ]
    expected = expectations(stamped, phase_start=100.0)
    assert expected.ls_windows == {("u1", 100.0): 2}
    assert expected.ba_ids == {0: 101.0, 1: 103.0}


def test_tenant_stats_count_missing_results_as_misses() -> None:
    stats = tenant_stats([0.1, 0.2, 0.5], expected=4, target=0.3, records=30, seconds=10.0, wrong=1)
    assert stats["deadline_met_ratio"] == 0.5  # 2 of 4 expected: one late, one missing
    assert stats["p50_ms"] == 200.0
    assert stats["throughput_rps"] == 3.0
    assert stats["wrong_results"] == 1
    assert percentile([], 0.5) is None
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.99) == 4.0


def test_median_run_and_table() -> None:
    def run(met: float) -> dict[str, dict[str, object]]:
        stats = tenant_stats([0.1] * 10, expected=10, target=0.3, records=10, seconds=1.0)
        stats["deadline_met_ratio"] = met
        return {"LS": stats, "BA": dict(stats)}

    merged = median_run([run(0.2), run(0.9), run(0.5)])
    assert merged["LS"]["deadline_met_ratio"] == 0.5
    assert (merged["LS"]["deadline_met_min"], merged["LS"]["deadline_met_max"]) == (0.2, 0.9)
    table = format_table({"systems": {"cameo": merged}})
    assert "cameo" in table and "50%" in table


def test_quick_config_is_short_and_overridable() -> None:
    config = quick_config(systems=("fifo",), duration=12.0)
    assert config.repetitions == 1 and config.duration == 12.0 and config.systems == ("fifo",)
    assert math.isclose(S1Config().load, 0.75)


@dataclass
class _Outputs:
    ls: list[Output] = field(default_factory=list)
    ba: list[Output] = field(default_factory=list)


def test_a_warm_up_output_with_a_measured_jobs_id_is_not_that_jobs_result() -> None:
    # Warm-up and measured jobs share ids 0..n: the warm-up output of id 0 (sent at 50, out at 60)
    # arrives first, but job 0 of the measured phase was sent at 100 and came out at 100.5.
    expected = Expectations(ba_ids={0: 100.0, 1: 101.0})
    outputs = _Outputs(
        ba=[
            Output({"id": 0, "ts": 50.0, "score": 1}, 60.0),
            Output({"id": 0, "ts": 100.0, "score": 1}, 100.5),
            Output({"id": 1, "ts": 101.0, "score": 1}, 101.2),
            Output({"id": 1, "ts": 101.0, "score": 1}, 103.0),  # a duplicate counts once, first wins
        ]
    )
    result = measure("fifo", S1Config(ba_target=1.0), expected, outputs, 99.0, 110.0)
    assert result["BA"]["latencies_ms"] == [200.0, 500.0]
    assert result["BA"]["results"] == 2 and result["BA"]["deadline_met_ratio"] == 1.0
