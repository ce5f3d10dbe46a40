"""``cadenza bench throughput --workload``: an unknown workload is refused with one clear line, before
any broker or peer venv starts."""

from __future__ import annotations

from pathlib import Path

from tests.cli.bench_run import run_bench


def test_an_unknown_workload_is_refused_before_anything_starts(tmp_path: Path) -> None:
    output = run_bench(tmp_path, "throughput", "--out", str(tmp_path / "out"), "--workload", "windowz")
    assert "unknown workload 'windowz'; known: map, windowed" in output, output
    assert "Traceback" not in output
    assert not (tmp_path / "out").exists()
    assert not (tmp_path / "bench-venvs").exists()
