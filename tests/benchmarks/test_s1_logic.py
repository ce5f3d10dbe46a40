"""The pure parts of S1: the seeded input plan, what a run must produce, and how runs are summarised."""

from __future__ import annotations

import bisect
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from bench_s1 import check_load, format_table, verdict
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from cadenza.demo.machine import machine_busy_seconds, process_cpu_seconds
from cadenza.demo.s1_config import WARMUP_FIRST_ID, Capacity, S1Config, quick_config
from cadenza.demo.s1_io import Output, Send, plan
from cadenza.demo.s1_plot import plot
from cadenza.demo.s1_process import CpuSample
from cadenza.demo.s1_results import (
    LOAD_TOLERANCE,
    Expectations,
    actual_load,
    expectations,
    measure,
    median_run,
    sustained_rate,
    tenant_stats,
)
from cadenza.demo.worker_metrics import (
    STAGES,
    histogram_quantile,
    kafka_requests,
    loop_stalls,
    planned_hops,
    stage_buckets,
    stage_percentiles,
)
from cadenza.infra.metrics.names import LATENCY_BUCKETS
from cadenza.infra.metrics.quantiles import sample_quantile as percentile


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
    capacity = Capacity(ls_rps=None, ba_rps=1000.0, iterations=1)
    result = measure("fifo", S1Config(ba_target=1.0), expected, outputs, 99.0, 110.0, capacity)
    assert result["BA"]["latencies_ms"] == [200.0, 500.0]
    assert result["BA"]["results"] == 2 and result["BA"]["deadline_met_ratio"] == 1.0


def test_warm_up_jobs_do_not_share_ids_with_measured_ones() -> None:
    # Shared ids made the measurement match measured jobs with warm-up results: negative latencies.
    config = S1Config()
    warm = plan(config, 500.0, 8.0, bursts=False, seed=1, first_id=WARMUP_FIRST_ID)
    measured = plan(config, 500.0, 40.0, bursts=True, seed=2)
    warm_ids = {s.value["id"] for s in warm if s.tenant == "BA"}
    measured_ids = {s.value["id"] for s in measured if s.tenant == "BA"}
    assert warm_ids and measured_ids
    assert not warm_ids & measured_ids
    assert min(measured_ids) == 0 and min(warm_ids) == WARMUP_FIRST_ID


def _served(sent: list[float], rate: float) -> list[float]:
    """Completion times of a single server running ``rate`` jobs per second, first come first served."""
    done: list[float] = []
    free = 0.0
    for at in sorted(sent):
        free = max(free, at) + 1.0 / rate
        done.append(free)
    return done


def test_sustained_rate_is_the_service_rate_while_a_backlog_waits() -> None:
    # A burst of 1000 jobs in the first second into a server of 200/s, then a trickle it keeps up with.
    sent = [i / 1000 for i in range(1000)] + [6.0 + i / 50 for i in range(100)]
    done = _served(sent, 200.0)
    rate = sustained_rate(sent, done, backlog=50)
    assert rate is not None
    assert math.isclose(rate, 200.0, rel_tol=0.05)


def test_sustained_rate_is_unknown_when_nothing_ever_queued() -> None:
    sent = [i / 100 for i in range(1000)]  # 100/s into a server of 1000/s
    assert sustained_rate(sent, _served(sent, 1000.0), backlog=50) is None
    assert sustained_rate([], [], backlog=1) is None


def test_actual_load_marks_a_phase_more_than_a_tenth_off_the_load_asked_for() -> None:
    normal = actual_load(0.75, input_rps=750.0, sustained_rps=1000.0, calibrated_rps=1000.0)
    assert normal["actual"] == 0.75 and not normal["off_load"]
    lost = 1000.0 / (1 + LOAD_TOLERANCE) * 0.99  # capacity just beyond what the tolerance allows
    slow = actual_load(0.75, input_rps=750.0, sustained_rps=lost, calibrated_rps=1000.0)
    assert slow["actual"] > 0.75 * (1 + LOAD_TOLERANCE) and slow["off_load"]
    kept = actual_load(0.75, input_rps=750.0, sustained_rps=1000.0 / 1.09, calibrated_rps=1000.0)
    assert not kept["off_load"]
    # Off both ways: a phase with more capacity than calibrated ran at a lighter load than asked.
    fast = actual_load(0.75, input_rps=750.0, sustained_rps=1000.0 * 1.2, calibrated_rps=1000.0)
    assert fast["actual"] == 0.625 and fast["off_load"]
    # A burst-heavy draw brings more than the mean input: the input's doing, not the machine's.
    bursty = actual_load(0.75, input_rps=900.0, sustained_rps=1000.0, calibrated_rps=1000.0)
    assert bursty["actual"] == 0.75 and bursty["input_load"] == 0.9 and not bursty["off_load"]
    # An overload the run asked for (--load 1.5) is not the machine's fault.
    asked = actual_load(1.5, input_rps=1500.0, sustained_rps=1000.0, calibrated_rps=1000.0)
    assert asked["actual"] == 1.5 and not asked["off_load"]
    unknown = actual_load(0.75, input_rps=750.0, sustained_rps=None, calibrated_rps=1000.0)
    assert unknown["actual"] is None and not unknown["off_load"]


def test_the_load_comes_from_the_time_per_job_where_the_worker_reports_it() -> None:
    # Jobs took 6 ms against 5 at calibration: a fifth less capacity, whatever the bursts' output said.
    load = actual_load(
        0.75, 750.0, sustained_rps=1000.0, calibrated_rps=1000.0, run_s=0.006, calibrated_run_s=0.005
    )
    assert load["actual"] == 0.9 and load["off_load"]
    assert load["output_load"] == 0.75  # the output-based figure stays beside it
    same = actual_load(
        0.75, 750.0, sustained_rps=500.0, calibrated_rps=1000.0, run_s=0.0051, calibrated_run_s=0.005
    )
    assert same["actual"] == 0.765 and not same["off_load"] and same["output_load"] == 1.5
    assert actual_load(0.75, 750.0, None, 1000.0, run_s=0.005, calibrated_run_s=None)["actual"] is None


def test_the_table_shows_each_phases_load_and_says_off_load() -> None:
    stats = tenant_stats([0.1] * 10, expected=10, target=0.3, records=10, seconds=1.0)
    loads = [
        actual_load(0.75, 750.0, 1000.0, 1000.0),
        actual_load(0.75, 750.0, 500.0, 1000.0),
    ]
    merged = median_run([{"LS": dict(stats), "BA": dict(stats), "load": load} for load in loads])
    assert merged["load"] == {"actual": [0.75, 1.5], "off_load": [False, True]}
    table = format_table({"systems": {"fifo": merged}})
    assert "0.75, 1.50 OFF-LOAD" in table
    assert "OFF-LOAD:" in table


@pytest.mark.parametrize("load", [0.0, -1.0, 10.0, math.nan])
def test_check_load_refuses_nonsense(load: float) -> None:
    with pytest.raises(ValueError, match="--load"):
        check_load(load)
    assert check_load(1.5) == 1.5


def _exposition(metric: str, tenant: str, samples: list[float], operator: str = "op") -> list[str]:
    """Prometheus text of a histogram of ``samples`` over the worker's buckets, as the worker exports it."""
    counts = [0] * (len(LATENCY_BUCKETS) + 1)
    for value in samples:
        counts[bisect.bisect_left(LATENCY_BUCKETS, value)] += 1
    lines, running = [], 0
    for bound, count in zip((*LATENCY_BUCKETS, math.inf), counts, strict=True):
        running += count
        le = "+Inf" if math.isinf(bound) else repr(bound)
        labels = f'tenant="{tenant}",pipeline="p",operator="{operator}",le="{le}"'
        lines.append(f"{metric}_bucket{{{labels}}} {float(running)}")
    return lines


@given(
    st.lists(st.floats(min_value=0.0, max_value=400.0), min_size=1, max_size=200),
    st.sampled_from([0.5, 0.99]),
)
def test_histogram_quantile_lies_in_the_bucket_of_the_true_quantile(samples: list[float], q: float) -> None:
    text = "\n".join(_exposition("cadenza_queue_wait_seconds", "LS", samples))
    cumulative = stage_buckets(text)[("queue_wait", "LS")]
    got = histogram_quantile(cumulative, q)
    assert got is not None
    true = percentile(samples, q)  # brute force: the sorted samples
    assert true is not None
    index = bisect.bisect_left(LATENCY_BUCKETS, true)
    lower = 0.0 if index == 0 else LATENCY_BUCKETS[index - 1]
    upper = LATENCY_BUCKETS[index] if index < len(LATENCY_BUCKETS) else LATENCY_BUCKETS[-1]
    assert lower * 1000 - 1e-6 <= got <= upper * 1000 + 1e-6


def test_stage_percentiles_count_only_the_measured_phase_and_pool_a_tenants_operators() -> None:
    warm_up = [5.0] * 100  # slow warm-up: must not show
    measured = [0.01] * 50
    before = stage_buckets("\n".join(_exposition("cadenza_fetch_latency_seconds", "LS", warm_up)))
    after_lines = (
        _exposition("cadenza_fetch_latency_seconds", "LS", warm_up + measured)
        + _exposition("cadenza_repartition_hop_seconds", "LS", [0.2] * 10, operator="window")
        + _exposition("cadenza_run_time_seconds", "BA", [0.001] * 7, operator="a")
        + _exposition("cadenza_run_time_seconds", "BA", [0.001] * 3, operator="b")
        + ['cadenza_records_consumed_total{tenant="LS",pipeline="p",operator="op"} 3.0']
    )
    stages = stage_percentiles(before, stage_buckets("\n".join(after_lines)))
    assert set(stages) == {"LS", "BA"}
    assert stages["LS"]["fetch"]["count"] == 50
    p99 = stages["LS"]["fetch"]["p99_ms"]
    assert p99 is not None and 5.0 <= p99 <= 10.0  # the 10 ms bucket, not the warm-up's 5 s
    assert stages["LS"]["repartition_hop"]["count"] == 10
    assert stages["BA"]["run"]["count"] == 10  # both operators of the tenant
    assert set(stages["BA"]) == {"run"}
    assert set(STAGES) >= set(stages["LS"])


def test_the_plot_draws_stages_and_loads(tmp_path: Path) -> None:
    def run(actual: float, over: bool) -> dict[str, object]:
        stats = tenant_stats([0.1, 0.2], expected=2, target=0.3, records=2, seconds=1.0)
        stats["stages"] = {stage: {"p50_ms": 1.0, "p99_ms": 2.0, "count": 2.0} for stage in STAGES}
        load = actual_load(0.75, 750.0, 1000.0 * 0.75 / actual, 1000.0)
        assert load["off_load"] is over
        return {"LS": stats, "BA": dict(stats), "load": load}

    runs = {"fifo": [run(0.7, False)], "cameo": [run(0.8, False), run(1.2, True)], "faust": []}
    merged = median_run(runs["cameo"])
    assert merged["LS"]["stages"]["queue_wait"] == {"p50_ms": 1.0, "p99_ms": 2.0}
    path = tmp_path / "s1.png"
    plot(runs, S1Config(), path)
    assert path.stat().st_size > 10_000


def test_the_verdict_says_plainly_whether_the_target_was_met() -> None:
    met = tenant_stats([0.1] * 100, expected=100, target=0.3, records=100, seconds=1.0)
    assert verdict(met) == "MET: 100% within 300 ms"
    missed = tenant_stats([0.1] * 90 + [0.5] * 5, expected=100, target=0.3, records=95, seconds=1.0)
    assert verdict(missed) == "MISSED: 90% within 300 ms (goal 99%, 5 missing)"
    late = tenant_stats([0.1] * 95 + [0.5] * 5, expected=100, target=0.3, records=100, seconds=1.0)
    assert verdict(late) == "MISSED: 95% within 300 ms (goal 99%)"
    assert verdict(tenant_stats([], expected=0, target=0.3, records=0, seconds=1.0)) == "no results expected"


def test_cpu_between_two_samples_per_process_and_for_the_rest_of_the_machine() -> None:
    start = CpuSample(at=10.0, system_s=5.0, broker_s=2.0, machine_s=100.0)
    end = CpuSample(at=30.0, system_s=20.5, broker_s=9.0, machine_s=130.0)
    assert end.since(start) == {
        "wall_s": 20.0,
        "system_s": 15.5,
        "broker_s": 7.0,
        "machine_s": 30.0,
        "others_s": 7.5,
    }
    # No broker of its own (an external one): the rest of the machine includes it.
    bare = CpuSample(at=30.0, system_s=20.5, broker_s=None, machine_s=130.0)
    assert bare.since(CpuSample(10.0, 5.0, None, 100.0))["others_s"] == 14.5


def test_the_cpu_of_a_process_and_of_the_machine_grow_with_work() -> None:
    pid = os.getpid()
    before, machine_before = process_cpu_seconds(pid), machine_busy_seconds()
    if before is None or machine_before is None:
        pytest.skip("no /proc on this system")
    spent = time.process_time() + 0.3
    while time.process_time() < spent:
        pass
    after, machine_after = process_cpu_seconds(pid), machine_busy_seconds()
    assert after is not None and machine_after is not None
    assert after - before >= 0.2
    assert machine_after - machine_before >= 0.2
    assert process_cpu_seconds(None) is None


def test_kafka_requests_are_what_each_client_sent_between_the_scrapes() -> None:
    registry = CollectorRegistry()
    requests = Counter("cadenza_kafka_requests", "", ("client", "request"), registry=registry)
    requests.labels("lane0", "Fetch").inc(40)
    requests.labels("producer", "Produce").inc(5)
    before = generate_latest(registry).decode()
    requests.labels("lane0", "Fetch").inc(12)
    requests.labels("lane1", "Fetch").inc(3)  # a client that appeared in between counts from zero
    after = generate_latest(registry).decode()
    # The producer sent nothing in between: it is left out rather than shown with 0.
    assert kafka_requests(before, after) == {"lane0": {"Fetch": 12.0}, "lane1": {"Fetch": 3.0}}
    assert kafka_requests("", "") == {}


def test_loop_stalls_are_the_stalls_and_seconds_of_each_phase_between_the_scrapes() -> None:
    registry = CollectorRegistry()
    stalls = Counter("cadenza_worker_stalls", "", ("phase",), registry=registry)
    seconds = Counter("cadenza_worker_stall_seconds", "", ("phase",), registry=registry)
    stalls.labels("run").inc(2)
    seconds.labels("run").inc(0.5)
    stalls.labels("fetch").inc(0)
    before = generate_latest(registry).decode()
    stalls.labels("run").inc(1)
    seconds.labels("run").inc(0.25)
    stalls.labels("checkpoint").inc(4)
    seconds.labels("checkpoint").inc(1.5)
    after = generate_latest(registry).decode()
    assert loop_stalls(before, after) == {
        "run": {"stalls": 1.0, "seconds": 0.25},
        "checkpoint": {"stalls": 4.0, "seconds": 1.5},
    }
    assert loop_stalls(after, after) == {}


def test_planned_hops_are_each_tenants_largest_at_the_scrape() -> None:
    registry = CollectorRegistry()
    hop = Gauge("cadenza_planned_hop_seconds", "", ("tenant", "pipeline", "operator"), registry=registry)
    hop.labels("LS", "ls", "3-window").set(0.1875)
    hop.labels("LS", "ls2", "2-window").set(0.05)
    hop.labels("BA", "ba", "2-count").set(0.0)
    assert planned_hops(generate_latest(registry).decode()) == {"LS": 187.5, "BA": 0.0}
    assert planned_hops("") == {}
