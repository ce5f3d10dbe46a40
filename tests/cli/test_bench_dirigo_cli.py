"""``cadenza bench dirigo``: its options, and a system it does not know refused before anything starts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.cli.bench_run import run_bench


def test_the_help_names_the_options_and_the_systems(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "cadenza", "bench", "dirigo", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200", "CADENZA_HOME": str(tmp_path)},
        check=False,
    )
    assert result.returncode == 0, result.stderr
    for option in ("--out", "--quick", "--repetitions", "--systems", "--bootstrap"):
        assert option in result.stdout
    assert "fifo,cameo,cameo-auto,cameo-max" in result.stdout


def test_an_unknown_system_is_refused_with_the_ones_there_are(tmp_path: Path) -> None:
    output = run_bench(tmp_path, "dirigo", "--out", str(tmp_path / "out"), "--systems", "cameo,warp")
    assert "unknown systems ['warp']; choose from fifo, cameo, cameo-auto, cameo-max" in output, output
    assert "Traceback" not in output
    assert not (tmp_path / "out").exists()
