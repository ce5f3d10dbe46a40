"""One short throughput run of cadenza and the raw loop against the suite's broker.

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
def test_a_quick_run_writes_json_and_plot_with_rates(kafka_settings: KafkaSettings, tmp_path: Path) -> None:
    lines: list[str] = []
    result = run_benchmark(
        tmp_path,
        quick=True,
        bootstrap=kafka_settings.bootstrap_servers,
        records=3000,
        systems=["cadenza", "raw"],
        progress=lines.append,
    )
    written = json.loads((tmp_path / "throughput.json").read_text())
    assert written == result
    assert (tmp_path / "throughput.png").read_bytes().startswith(b"\x89PNG")
    for name in ("cadenza", "raw"):
        entry = written["systems"][name]
        assert entry["rps"] is not None and entry["rps"] > 0, entry
        assert entry["runs"][0]["outputs"] >= 3000
    assert written["settings"]["records"] == 3000
    assert any("cadenza" in line for line in lines)
