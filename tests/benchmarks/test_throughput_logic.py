"""The pure parts of the throughput benchmark and its peers: rates, summaries, result shape, workload."""

from __future__ import annotations

import json
import os
import statistics
import sys
from pathlib import Path

import pytest
from bench_throughput import (
    SYSTEMS,
    build_result,
    config_for,
    format_table,
    plot,
    run_order,
    run_rates,
    summarize,
)
from peers.counter import proc_cpu_seconds
from peers.cpu_work import burn
from peers.venvs import MARKER, PeerEnv, PeerInstallError, _run_streaming, is_current
from peers.workload import make_records, transform


def _run(rps: float, per_cpu: float | None = None) -> dict[str, object]:
    return {"rps": rps, "rps_per_cpu_s": per_cpu if per_cpu is not None else rps * 2}


def test_run_rates_count_the_outputs_after_the_first_over_first_to_last() -> None:
    rates = run_rates(outputs=1001, first_at=10.0, last_at=12.0, cpu_first_s=1.0, cpu_last_s=2.0)
    assert rates["rps"] == pytest.approx(1000 / 2.0)
    assert rates["rps_per_cpu_s"] == pytest.approx(1000 / 1.0)
    assert rates["cpu_utilisation"] == pytest.approx(0.5)


def test_run_rates_without_cpu_samples_leave_the_cpu_rate_out() -> None:
    rates = run_rates(outputs=11, first_at=0.0, last_at=1.0, cpu_first_s=None, cpu_last_s=None)
    assert rates["rps"] == pytest.approx(10.0)
    assert rates["rps_per_cpu_s"] is None


@pytest.mark.parametrize(("outputs", "first", "last"), [(1, 0.0, 1.0), (10, 2.0, 2.0), (10, 3.0, 2.0)])
def test_run_rates_refuse_what_is_not_a_rate(outputs: int, first: float, last: float) -> None:
    with pytest.raises(ValueError):
        run_rates(outputs, first, last, None, None)


def test_summarize_reports_median_min_max_and_keeps_every_run() -> None:
    runs = [_run(300.0), _run(100.0), _run(200.0)]
    summary = summarize(runs)
    assert summary["rps"] == statistics.median([300.0, 100.0, 200.0])
    assert (summary["rps_min"], summary["rps_max"]) == (100.0, 300.0)
    assert summary["rps_per_cpu_s"] == statistics.median([600.0, 200.0, 400.0])
    assert summary["runs"] == runs


def test_summarize_skips_failed_runs_and_says_none_when_all_failed() -> None:
    failed = {"repetition": 1, "error": "timed out"}
    assert summarize([failed, _run(50.0)])["rps"] == 50.0
    assert summarize([failed])["rps"] is None
    assert summarize([failed])["runs"] == [failed]


def test_result_has_the_issue_shape_with_ratios_machine_and_commit() -> None:
    runs = {"cadenza": [_run(90.0)], "faust": [_run(30.0)], "quixstreams": [_run(45.0)], "raw": [_run(180.0)]}
    env: dict[str, object] = {"cpus": 2, "cpu_model": "test cpu", "commit": "abc1234"}
    result = build_result(runs, env, {"records": 10})
    assert set(result["systems"]) == {"cadenza", "faust", "quixstreams", "raw"}
    for entry in result["systems"].values():
        assert {"rps", "rps_min", "rps_max", "rps_per_cpu_s", "runs"} <= set(entry)
    assert result["commit"] == "abc1234"
    assert "commit" not in result["machine"] and result["machine"]["cpus"] == 2
    assert result["ratios"]["cadenza_over_faust"] == pytest.approx(90.0 / 30.0)
    assert result["ratios"]["cadenza_over_raw"] == pytest.approx(90.0 / 180.0)
    json.dumps(result)  # must be writable as JSON
    assert "cadenza" in format_table(result)


def test_a_system_without_a_successful_run_gives_no_ratio_and_still_plots(tmp_path: Path) -> None:
    runs = {"cadenza": [_run(90.0)], "faust": [{"repetition": 1, "error": "exited"}]}
    result = build_result(runs, {"commit": "x"}, {"records": 10, "repetitions": 1})
    assert result["ratios"]["cadenza_over_faust"] is None
    assert "failed" in format_table(result)
    png = plot(result, tmp_path / "throughput.png")
    assert png.read_bytes().startswith(b"\x89PNG")


def test_run_order_rotates_so_no_system_is_always_first() -> None:
    names = [s.name for s in SYSTEMS]
    firsts = {run_order(names, rep)[0] for rep in range(len(names))}
    assert firsts == set(names)
    assert all(sorted(run_order(names, rep)) == sorted(names) for rep in range(7))


def test_quick_is_one_repetition_of_less_input_than_the_full_run() -> None:
    quick, full = config_for(True), config_for(False)
    assert quick.repetitions == 1 and full.repetitions >= 3
    assert quick.records < full.records
    with pytest.raises(ValueError):
        config_for(False, records=1)


def test_records_are_seeded_and_the_map_adds_fields_without_losing_any() -> None:
    first, again, other = make_records(50, seed=7), make_records(50, seed=7), make_records(50, seed=8)
    assert first == again and first != other
    value = json.loads(first[0][1])
    mapped = transform(value)
    assert value.items() <= mapped.items() and len(mapped) > len(value)
    assert first[0][0] == value["user"].encode()


def test_burn_is_deterministic_and_depends_on_payload_and_iterations() -> None:
    assert burn("abc", 10) == burn("abc", 10)
    assert burn("abc", 10) != burn("abd", 10)
    assert burn("abc", 10) != burn("abc", 11)
    assert 0 <= burn("abc", 0) < 2**32
    with pytest.raises(ValueError):
        burn("abc", -1)


def test_proc_cpu_seconds_reads_this_process_and_none_for_a_missing_one() -> None:
    before = proc_cpu_seconds(os.getpid())
    assert before is not None and before >= 0
    sum(i * i for i in range(200_000))  # burn a little CPU so the reading may grow
    after = proc_cpu_seconds(os.getpid())
    assert after is not None and after >= before
    assert proc_cpu_seconds(2**22 + 12345) is None  # above the default pid_max


def test_a_venv_is_reused_only_with_a_matching_marker(tmp_path: Path) -> None:
    peer = PeerEnv("demo", ("pkg==1.0",), probe="pkg")
    venv = tmp_path / "demo"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    assert not is_current(venv, peer)  # no marker: an unfinished install
    (venv / MARKER).write_text(json.dumps(peer.marker()))
    assert is_current(venv, peer)
    assert not is_current(venv, PeerEnv("demo", ("pkg==2.0",), probe="pkg"))
    (venv / MARKER).write_text("{not json")
    assert not is_current(venv, peer)


def test_a_failed_install_step_names_the_peer_and_quotes_the_output_tail() -> None:
    peer = PeerEnv("demo", ("pkg==1.0",), probe="pkg")
    lines: list[str] = []
    script = "import sys; [print('line', i) for i in range(40)]; sys.exit(3)"
    with pytest.raises(PeerInstallError) as caught:
        _run_streaming([sys.executable, "-c", script], peer, "install the pinned packages", lines.append)
    message = str(caught.value)
    assert "'demo'" in message and "pkg==1.0" in message and "exit code 3" in message
    assert "line 39" in message and "line 0\n" not in message  # the tail, not the whole output
    assert len(lines) == 40  # every line was shown as progress
