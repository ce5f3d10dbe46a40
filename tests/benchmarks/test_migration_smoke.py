"""One tiny S5 run against the suite's broker: real worker processes scale out 1 -> 2 and back in."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench_migration import check_shape, quick_config, run_benchmark

from cadenza.settings import KafkaSettings


@pytest.mark.kafka
@pytest.mark.timeout(240)
def test_a_tiny_cooperative_run_measures_both_migrations_and_checks_the_results(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    lines: list[str] = []
    config = quick_config(
        keys=2000,
        steady_s=2.0,
        settle_timeout_s=20.0,
        migration_timeout_s=90.0,
        drain_s=60.0,
        strategies=("cooperative", "fluid"),
    )
    result = run_benchmark(
        tmp_path, config=config, bootstrap=kafka_settings.bootstrap_servers, progress=lines.append
    )
    written = json.loads((tmp_path / "migration.json").read_text())
    check_shape(written)
    assert written["strategies"].keys() == {"cooperative"}, written.get("failed")
    assert "fluid" in written["skipped"]
    assert any(line.startswith("fluid: skipped") for line in lines)
    entry = written["strategies"]["cooperative"]
    assert entry == json.loads(json.dumps(result["strategies"]["cooperative"]))
    assert entry["input"]["lost_records"] == 0 and entry["input"]["records_in_topic"] > 2000
    assert entry["big"]["windows_expected"] == 2000
    assert entry["results_correct"] is True, entry["big"]
    for phase in ("scale_out", "scale_in"):
        assert entry["phases"][phase]["duration_s"] > 0
        assert entry["phases"][phase]["ls_windows"] > 0
    assert entry["duration_s"] == pytest.approx(
        entry["phases"]["scale_out"]["duration_s"] + entry["phases"]["scale_in"]["duration_s"], abs=0.01
    )
    assert entry["ls_max_ms"] is not None and entry["ls_max_ms"] > 0
    assert entry["restored_keys"] > 0  # the moved partitions' state came from the changelog
    assert (tmp_path / "migration.png").read_bytes().startswith(b"\x89PNG")
