"""``cadenza bench migration``: a strategy it does not know is skipped, said, and recorded."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_only_unknown_strategies_skip_each_with_a_line_write_the_json_and_fail(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "cadenza",
            "bench",
            "migration",
            "--out",
            str(tmp_path),
            "--quick",
            "--strategies",
            "teleport,warp",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert "teleport: skipped" in output and "warp: skipped" in output
    assert "no strategy ran to the end" in output
    written = json.loads((tmp_path / "migration.json").read_text())
    assert written["strategies"] == {}
    assert set(written["skipped"]) == {"teleport", "warp"}
    assert written["config"]["strategies"] == ["teleport", "warp"]
    assert {"machine", "commit"} <= written.keys()
