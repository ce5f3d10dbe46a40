"""The pure parts of S6 (``bench_dirigo.py``): what each system's worker is told, the input, the
calibration's arithmetic, what /metrics say with and without a lessee runtime, the summary, the
issue's checks and the table. No broker, no worker."""

from __future__ import annotations

import importlib
import os
import pickle
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from bench_dirigo import (
    SCENARIOS_DIR,
    SYSTEMS,
    DirigoConfig,
    DirigoTopics,
    io_sends,
    latency_timeline,
    parse_systems,
    phase_order,
    plan_phase,
    planned_rates,
    quick_config,
    step_env,
    worker_env,
)
from dirigo_metrics import lessee_gauge, lessee_usage, run_seconds
from dirigo_report import check_targets, format_table, summarise
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from cadenza.demo.s1_config import Capacity
from cadenza.demo.s1_process import process_tree_cpu_seconds
from cadenza.pipelines.parallel import ParallelSpec

# -- what each system's worker is told ----------------------------------------------------------------


def test_without_lessees_both_maps_run_on_the_worker_thread() -> None:
    for name in ("fifo", "cameo"):
        env = step_env(SYSTEMS[name], DirigoConfig(cores=2))
        assert (env["S6_BA_PARALLEL"], env["S6_IO_PARALLEL"]) == ("1", "1")


def test_auto_leases_processes_for_ba_and_threads_for_io() -> None:
    env = step_env(SYSTEMS["cameo-auto"], DirigoConfig(cores=2))
    assert env["S6_BA_PARALLEL"] == env["S6_IO_PARALLEL"] == "auto"
    assert (env["S6_BA_EXECUTOR"], env["S6_IO_EXECUTOR"]) == ("process", "thread")


def test_always_on_keeps_cores_minus_one_processes_and_the_thread_budget() -> None:
    env = step_env(SYSTEMS["cameo-max"], DirigoConfig(cores=4, max_thread_lessees=8))
    assert env["S6_BA_PARALLEL"] == "3"
    assert env["S6_IO_PARALLEL"] == "8"


def test_on_two_cores_always_on_asks_two_processes_of_a_budget_of_one() -> None:
    # parallel=1 would be the worker's thread; the budget (cores - 1) holds parallel=2 to one lessee.
    env = step_env(SYSTEMS["cameo-max"], DirigoConfig(cores=2))
    assert env["S6_BA_PARALLEL"] == "2"
    assert not ParallelSpec(int(env["S6_BA_PARALLEL"]), "process", None).inline


def test_the_worker_can_import_the_pipelines_and_gets_the_lessee_settings() -> None:
    config = DirigoConfig(cores=2, max_thread_lessees=8)
    env = worker_env(SYSTEMS["cameo-auto"], config, DirigoTopics.fresh("r1"))
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(SCENARIOS_DIR)
    assert (env["CADENZA_CORES"], env["CADENZA_MAX_THREAD_LESSEES"]) == ("2", "8")
    assert (env["S6_IO_IN"], env["S6_IO_OUT"]) == ("s6-r1-io-in", "s6-r1-io-out")
    assert env["S6_IO_TARGET"] == "1"


@pytest.fixture
def s6_pipelines(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setenv("S6_BA_PARALLEL", "auto")
    monkeypatch.setenv("S6_IO_PARALLEL", "8")
    monkeypatch.setenv("S6_IO_EXECUTOR", "thread")
    monkeypatch.setenv("S6_IO_SLEEP", "0.01")
    monkeypatch.setenv("S1_CPU_SECONDS", "0.001")
    module = importlib.import_module("s6_pipelines")
    yield importlib.reload(module)
    monkeypatch.undo()
    importlib.reload(module)


def _map_spec(pipeline: Any) -> ParallelSpec:
    graph = pipeline.compile()
    (node,) = [node for node in graph.nodes if node.id.endswith("-map")]
    return ParallelSpec.of(node.parameters)


def test_the_pipelines_declare_the_lessees_the_environment_asks_for(s6_pipelines: Any) -> None:
    assert _map_spec(s6_pipelines.ba) == ParallelSpec(None, "process", None)
    assert _map_spec(s6_pipelines.io) == ParallelSpec(8, "thread", None)
    assert {p.tenant for p in (s6_pipelines.ls, s6_pipelines.ba, s6_pipelines.io)} == {"LS", "BA", "IO"}


def test_the_maps_pickle_by_name_and_stamp_their_cpu(s6_pipelines: Any) -> None:
    assert pickle.loads(pickle.dumps(s6_pipelines.score)) is s6_pipelines.score
    job = s6_pipelines.Job(id=3, payload="x", ts=1.5)
    scored = s6_pipelines.score(job)
    assert (scored.id, scored.ts) == (3, 1.5)
    assert scored.cpu_ms >= 1.0  # its CPU seconds, however fast the host
    started = time.monotonic()
    waited = s6_pipelines.wait_io(job)
    assert time.monotonic() - started >= 0.01
    assert waited.cpu_ms < 5.0  # a blocked call takes (almost) no CPU


# -- the input and the calibration's arithmetic ------------------------------------------------------


def test_io_requests_are_steady_with_their_own_ids() -> None:
    sends = io_sends(100.0, 2.0, first_id=50)
    assert len(sends) == 200
    assert [s.value["id"] for s in sends] == list(range(50, 250))
    assert sends[1].at - sends[0].at == pytest.approx(0.01)
    assert {s.tenant for s in sends} == {"IO"}


def test_a_phase_plans_all_three_tenants_in_send_order_and_is_seeded() -> None:
    config = quick_config()
    first = plan_phase(config, 400.0, 10.0, bursts=True, seed=3)
    assert first == plan_phase(config, 400.0, 10.0, bursts=True, seed=3)
    assert [s.at for s in first] == sorted(s.at for s in first)
    counts = {t: sum(1 for s in first if s.tenant == t) for t in ("LS", "BA", "IO")}
    assert counts["LS"] == 1000 and counts["IO"] == 1000
    assert counts["BA"] > 0


def test_the_calibration_sets_ba_at_its_load_and_io_at_five_calls_in_flight() -> None:
    config = DirigoConfig()
    rates = planned_rates(config, Capacity(ls_rps=None, ba_rps=400.0, iterations=1))
    assert rates["ba_mean_rps"] == pytest.approx(1.2 * 400)
    assert rates["ba_burst_rps"] == pytest.approx(1.2 * 400 * config.base.burst_peak)
    assert rates["ba_cpu_cores"] == pytest.approx(1.2 * 400 * 0.002)  # more than one core's worth
    assert rates["io_in_flight"] == pytest.approx(5.0)


def test_the_defaults_are_the_issues_tenants() -> None:
    config = DirigoConfig()
    assert (config.base.ls_target, config.base.ba_cost_ms, config.base.ba_cost_kind) == (0.3, 2.0, "cpu")
    assert (config.io_rate, config.io_sleep_s, config.io_target) == (100.0, 0.05, 1.0)
    assert config.base.load == 1.2 and config.systems == tuple(SYSTEMS)


def test_a_bad_config_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown systems"):
        DirigoConfig(systems=("cameo", "warp"))
    with pytest.raises(ValueError, match="repetitions"):
        DirigoConfig(repetitions=0)
    with pytest.raises(ValueError, match=r"unknown systems \['warp'\]; choose from fifo"):
        parse_systems("cameo,warp")
    assert parse_systems(" fifo , cameo-auto ") == ("fifo", "cameo-auto")


def test_phases_rotate_so_no_system_always_runs_first() -> None:
    order = phase_order(("a", "b", "c"), 3)
    assert [name for name, rep in order if rep == 0] == ["a", "b", "c"]
    assert [name for name, rep in order if rep == 1] == ["b", "c", "a"]
    assert len(order) == 9


def test_the_topics_include_ios() -> None:
    topics = DirigoTopics.fresh("r")
    assert set(topics.inputs()) == set(topics.outputs()) == {"LS", "BA", "IO"}
    assert len(topics.specs(2)) == 6


# -- what /metrics say ------------------------------------------------------------------------------------


def _exposition(*, lessees: bool, leased: float = 0.0, seconds: float = 0.0) -> str:
    """A worker's /metrics as the lessee runtime exports them (labels tenant, pipeline, operator)."""
    registry = CollectorRegistry()
    run = Histogram("cadenza_run_time_seconds", "run", ["tenant"], registry=registry)
    run.labels("LS").observe(1.5 + seconds)
    if lessees:
        labels = ["tenant", "pipeline", "operator"]
        gauge = Gauge("cadenza_lessees", "leased", labels, registry=registry)
        gauge.labels("BA", "s6-ba", "2-map").set(leased)
        gauge.labels("IO", "s6-io", "2-map").set(leased * 4)
        counter = Counter("cadenza_lessee_seconds", "leased time", labels, registry=registry)
        counter.labels("BA", "s6-ba", "2-map").inc(seconds)
        counter.labels("IO", "s6-io", "2-map").inc(seconds * 4)
        for name in ("leases", "releases", "timeouts", "deaths", "abandoned"):
            Counter(f"cadenza_lessee_{name}", name, labels, registry=registry)
        Counter("cadenza_lessor_calls", "calls the loop ran", labels, registry=registry)
        handoff = Counter("cadenza_lessee_handoff_seconds", "handing off", labels, registry=registry)
        handed = Counter("cadenza_lessee_handed_calls", "calls handed", labels, registry=registry)
        handoff.labels("BA", "s6-ba", "2-map").inc(0.002 * seconds)
        handed.labels("BA", "s6-ba", "2-map").inc(seconds)
    return generate_latest(registry).decode()


def test_the_gauge_is_read_per_step_and_is_none_without_a_runtime() -> None:
    assert lessee_gauge(_exposition(lessees=True, leased=1)) == {"BA/2-map": 1.0, "IO/2-map": 4.0}
    assert lessee_gauge(_exposition(lessees=False)) is None


def test_lessee_usage_grows_per_tenant() -> None:
    usage = lessee_usage(_exposition(lessees=True), _exposition(lessees=True, seconds=10))
    assert usage["BA"]["lessee_s"] == pytest.approx(10.0)
    assert usage["IO"]["lessee_s"] == pytest.approx(40.0)
    assert usage["LS"]["lessee_s"] == 0.0  # exported, never leased
    assert usage["BA"]["timeouts"] == usage["BA"]["lessor_calls"] == 0.0
    assert usage["BA"]["handed_calls"] == 10.0
    assert usage["BA"]["handoff_ms"] == pytest.approx(2.0)
    assert usage["IO"]["handoff_ms"] is None  # handed nothing off


def test_lessee_usage_is_null_without_a_runtime_or_a_scrape() -> None:
    for after in (_exposition(lessees=False, seconds=3), ""):
        usage = lessee_usage(_exposition(lessees=False), after)
        assert all(value is None for row in usage.values() for value in row.values())


def test_run_seconds_per_tenant() -> None:
    assert run_seconds(_exposition(lessees=False), _exposition(lessees=False, seconds=2)) == {"LS": 2.0}
    assert run_seconds("", "") == {}


def test_the_latency_timeline_bins_by_second_of_result_time() -> None:
    rows = latency_timeline([(100.2, 0.1), (100.9, 0.5), (102.5, 0.2)], origin=100.0, target=0.3)
    assert [row["t"] for row in rows] == [0.0, 2.0]
    assert rows[0]["n"] == 2 and rows[0]["met"] == 0.5
    assert rows[1]["p99_ms"] == pytest.approx(200.0)


def test_the_cpu_of_a_process_counts_its_children() -> None:
    before = process_tree_cpu_seconds(os.getpid())
    burn = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass"
    subprocess.run([sys.executable, "-c", burn], check=True, timeout=30)
    after = process_tree_cpu_seconds(os.getpid())
    assert before is not None and after is not None
    assert after - before >= 0.25  # the child's, reaped, counts as this process's children's
    assert process_tree_cpu_seconds(None) is None


# -- the summary, the checks and the table ----------------------------------------------------------


def _tenant(ratio: float, *, lessee_s: float | None = None, cpu_s: float = 1.0) -> dict[str, Any]:
    return {
        "met": 0,
        "p50_ms": 10.0,
        "p95_ms": 20.0,
        "p99_ms": 30.0,
        "deadline_met_ratio": ratio,
        "throughput_rps": 1.0,
        "records": 1,
        "results": 100,
        "results_expected": 100,
        "wrong_results": 0,
        "target_ms": 300,
        "latencies_ms": [],
        "cpu_s": cpu_s,
        "run_s": 1.0,
        "lessee_s": lessee_s,
        "handoff_ms": None,
        "input_rps": 100.0,
    }


def _run(ls: float, ba: float, io: float, lessee_s: float | None = None) -> dict[str, Any]:
    share = None if lessee_s is None else lessee_s / 2
    ba_row = _tenant(ba, lessee_s=share)
    ba_row["load"] = {"actual": 1.2, "off_load": False, "mean_input_load": 1.27}
    return {
        "LS": _tenant(ls, lessee_s=None if lessee_s is None else 0.0),
        "BA": ba_row,
        "IO": _tenant(io, lessee_s=share),
        "lessee_s": lessee_s,
        "broker_cores": 0.12,
        "worker_cores": 1.1,
    }


def _result(**systems: list[dict[str, Any]]) -> dict[str, Any]:
    return {"systems": {name.replace("_", "-"): summarise(entries) for name, entries in systems.items()}}


def test_the_summary_keeps_each_repetitions_satisfaction_and_the_medians() -> None:
    merged = summarise([_run(1.0, 0.5, 0.2, 10.0), _run(0.98, 0.7, 0.4, 20.0), _run(0.99, 0.6, 0.3, 30.0)])
    assert merged["LS"]["satisfaction"] == [1.0, 0.98, 0.99]
    assert merged["LS"]["deadline_met_ratio"] == 0.99
    assert merged["LS"]["deadline_met_min"] == 0.98
    assert merged["BA"]["lessee_s"] == 10.0
    assert merged["lessee_s"] == 20.0
    assert merged["broker_cores"] == 0.12 and merged["broker_cores_max"] == 0.12


def test_every_check_met() -> None:
    result = _result(
        cameo=[_run(0.5, 0.4, 0.0)],
        cameo_auto=[_run(1.0, 0.995, 0.999, 60.0), _run(0.99, 0.995, 1.0, 60.0)],
        cameo_max=[_run(1.0, 1.0, 1.0, 100.0)],
    )
    checks = check_targets(result)
    assert {key: check["met"] for key, check in checks.items()} == {
        "auto_satisfied": True,
        "without_lessees_fail": True,
        "ls_every_repetition": True,
        "lessee_seconds": True,
    }
    assert checks["lessee_seconds"]["value"]["ratio"] == 0.6


def test_checks_missed() -> None:
    result = _result(
        cameo=[_run(1.0, 0.95, 0.93)],  # without lessees it coped: nothing for lessees to show
        cameo_auto=[_run(0.985, 0.99, 0.97, 80.0), _run(0.995, 0.99, 0.99, 80.0)],
        cameo_max=[_run(1.0, 1.0, 1.0, 100.0)],
    )
    checks = check_targets(result)
    assert checks["auto_satisfied"]["met"] is False  # IO's median 0.98
    assert checks["without_lessees_fail"]["met"] is False
    assert checks["ls_every_repetition"]["met"] is False  # 0.985 in one repetition
    assert checks["lessee_seconds"]["met"] is False  # 0.8x, and IO 0.02 below always-on


def test_checks_are_not_judged_without_their_systems_or_lessee_metrics() -> None:
    result = _result(fifo=[_run(0.2, 0.1, 0.0)], cameo=[_run(0.4, 0.1, 0.0)])
    checks = check_targets(result)
    assert checks["without_lessees_fail"]["met"] is True
    assert {checks[k]["met"] for k in ("auto_satisfied", "ls_every_repetition", "lessee_seconds")} == {None}
    runtime_missing = _result(cameo_auto=[_run(1.0, 1.0, 1.0)], cameo_max=[_run(1.0, 1.0, 1.0)])
    assert check_targets(runtime_missing)["lessee_seconds"]["met"] is None


def test_the_table_shows_each_system_its_resources_and_the_checks() -> None:
    result = _result(cameo=[_run(0.278, 0.107, 0.0)], cameo_auto=[_run(1.0, 0.995, 0.999, 60.0)])
    table = format_table(result)
    lines = table.splitlines()
    assert lines[0].split()[:4] == ["system", "LS", "in", "target"]
    assert any(line.startswith("cameo ") and "27.8%" in line and "10.7%" in line for line in lines)
    assert any(line.startswith("cameo-auto") and "60.0" in line and "0.12" in line for line in lines)
    assert any(line.startswith("cameo ") and line.endswith("1.27") for line in lines)  # BA's load
    assert "MET        without_lessees_fail" in table
    assert "NOT JUDGED lessee_seconds" in table
    assert "MET        auto_satisfied" in table
