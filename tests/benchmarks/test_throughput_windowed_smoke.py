"""One short windowed throughput run of cadenza against the suite's broker, its counts checked.

The peers are left out: building their venvs takes minutes and needs PyPI, which a test must not.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench_throughput import run_benchmark

from cadenza.settings import KafkaSettings


@pytest.mark.kafka
@pytest.mark.timeout(120)
def test_a_quick_windowed_run_of_cadenza_counts_every_window_right(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    lines: list[str] = []
    result = run_benchmark(
        tmp_path,
        quick=True,
        bootstrap=kafka_settings.bootstrap_servers,
        records=12_000,  # 2.4 s of event time: three windows per key, so first and last result differ
        repetitions=2,  # the second run must start from empty state, not the first run's
        systems=["cadenza"],
        workload="windowed",
        progress=lines.append,
    )
    written = json.loads((tmp_path / "throughput-windowed.json").read_text())
    assert written == result
    assert (tmp_path / "throughput-windowed.png").read_bytes().startswith(b"\x89PNG")
    entry = written["systems"]["cadenza"]
    assert len(entry["runs"]) == 2
    for run in entry["runs"]:
        assert "error" not in run, run
        assert run["results_correct"] is True, run
        assert run["windows_seen"] == run["windows_expected"] == written["settings"]["windows_expected"]
        assert run["rps"] > 0 and run["cpu_utilisation"] is not None
    assert entry["results_correct"] is True
    assert written["settings"]["windows_expected"] > 1000
    assert "raw" in written["left_out"]
    assert any("results correct: True" in line for line in lines)
