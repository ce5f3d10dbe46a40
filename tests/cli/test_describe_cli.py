from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def describe(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cadenza", "describe", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        check=False,
    )


def test_describe_prints_both_example_tenants() -> None:
    result = describe("examples/clicks_per_user.py", "examples/bulk_enrich.py")
    assert result.returncode == 0, result.stderr
    assert (
        "pipeline clicks-per-user\n  tenant:          ads (weight 2)\n  latency target:  250ms"
        in result.stdout
    )
    assert "4-count   count over tumbling 1s, lateness 200ms" in result.stdout
    assert (
        "pipeline bulk-enrich\n  tenant:          batch (weight 1)\n  latency target:  30s" in result.stdout
    )


def test_describe_finds_dotted_modules_from_the_working_directory() -> None:
    result = describe("tests.pipelines.sample_pipelines")
    assert result.returncode == 0, result.stderr
    assert "pipeline enrich" in result.stdout


def test_describe_reports_a_module_without_pipelines_without_a_traceback(tmp_path: Path) -> None:
    (tmp_path / "empty_mod.py").write_text("X = 1\n")
    result = describe("empty_mod", cwd=tmp_path)
    assert result.returncode == 1
    assert "module 'empty_mod' declares no pipeline" in result.stderr
    assert "Traceback" not in result.stderr
