"""``cadenza bench throughput --workload``: an unknown workload is refused with one clear line, before
any broker or peer venv starts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def test_an_unknown_workload_is_refused_before_anything_starts(tmp_path: Path) -> None:
    command = ["bench", "throughput", "--out", str(tmp_path / "out"), "--workload", "windowz"]
    result = subprocess.run(
        [sys.executable, "-m", "cadenza", *command],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200", "CADENZA_HOME": str(tmp_path)},
        check=False,
    )
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "unknown workload 'windowz'; known: map, windowed" in output, output
    assert "Traceback" not in output
    assert not (tmp_path / "out").exists()
    assert not (tmp_path / "bench-venvs").exists()
