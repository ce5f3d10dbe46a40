"""Run ``cadenza bench ...`` as a user would, in a fresh ``CADENZA_HOME`` (no peer venv is reused)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def run_bench(home: Path, *args: str) -> str:
    """Run ``cadenza bench ARGS`` expecting it to fail; its stdout and stderr together."""
    result = subprocess.run(
        [sys.executable, "-m", "cadenza", "bench", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200", "CADENZA_HOME": str(home)},
        check=False,
    )
    assert result.returncode != 0, result.stdout
    return result.stdout + result.stderr
