"""Tiny S5 runs against the suite's broker: real worker processes scale out 1 -> 2 and back in, by the
group protocol (``cooperative``) and by plan ownership's warm moves (``fluid``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench_migration import check_shape, quick_config, run_benchmark

from cadenza.settings import KafkaSettings


@pytest.mark.slow(
    "worker processes scale out and back in twice (cooperative and fluid), each step a rebalance"
)
@pytest.mark.kafka
@pytest.mark.timeout(420)
def test_tiny_cooperative_and_fluid_runs_measure_both_migrations_and_check_the_results(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    lines: list[str] = []
    config = quick_config(
        keys=2000,
        steady_s=2.0,
        settle_timeout_s=20.0,
        migration_timeout_s=90.0,
        drain_s=60.0,
        strategies=("cooperative", "fluid", "teleport"),
    )
    result = run_benchmark(
        tmp_path, config=config, bootstrap=kafka_settings.bootstrap_servers, progress=lines.append
    )
    written = json.loads((tmp_path / "migration.json").read_text())
    check_shape(written)
    assert written["strategies"].keys() == {"cooperative", "fluid"}, written.get("failed")
    assert "unknown strategy" in written["skipped"]["teleport"]
    assert any(line.startswith("teleport: skipped") for line in lines)
    for name in ("cooperative", "fluid"):
        entry = written["strategies"][name]
        assert entry == json.loads(json.dumps(result["strategies"][name]))
        assert entry["input"]["lost_records"] == 0 and entry["input"]["records_in_topic"] > 2000
        assert entry["big"]["windows_expected"] == 2000
        assert entry["results_correct"] is True, (name, entry["big"])
        for phase in ("scale_out", "scale_in"):
            assert entry["phases"][phase]["duration_s"] > 0
            assert entry["phases"][phase]["ls_windows"] > 0
        assert entry["duration_s"] == pytest.approx(
            entry["phases"]["scale_out"]["duration_s"] + entry["phases"]["scale_in"]["duration_s"], abs=0.01
        )
        assert entry["ls_max_ms"] is not None and entry["ls_max_ms"] > 0
        assert entry["restored_keys"] > 0  # the moved partitions' state came from the changelog
    # Fluid: one partition per step, half of each topic's out and all of it back.
    steps = written["strategies"]["fluid"]["plan_steps"]
    assert all(len(step["moves"]) == 1 for scale in ("scale_out", "scale_in") for step in steps[scale])
    assert len(steps["scale_out"]) == len(steps["scale_in"]) > 0
    assert (tmp_path / "migration.png").read_bytes().startswith(b"\x89PNG")
