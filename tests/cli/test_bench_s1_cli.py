"""``cadenza bench s1 --load``: a nonsense load is refused with one clear line, before anything starts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.parametrize("load", ["0", "7.5", "nan"])
def test_a_load_outside_the_range_is_refused_before_any_broker_starts(tmp_path: Path, load: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "cadenza", "bench", "s1", "--out", str(tmp_path / "out"), "--load", load],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200", "CADENZA_HOME": str(tmp_path)},
        check=False,
    )
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert f"--load {float(load):g} is outside" in output, output
    assert "Traceback" not in output
    assert not (tmp_path / "out" / "s1.json").exists()
