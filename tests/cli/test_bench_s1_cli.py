"""``cadenza bench s1 --load``: a nonsense load is refused with one clear line, before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.bench_run import run_bench


@pytest.mark.parametrize("load", ["0", "7.5", "nan"])
def test_a_load_outside_the_range_is_refused_before_any_broker_starts(tmp_path: Path, load: str) -> None:
    output = run_bench(tmp_path, "s1", "--out", str(tmp_path / "out"), "--load", load)
    assert f"--load {float(load):g} is outside" in output, output
    assert "Traceback" not in output
    assert not (tmp_path / "out" / "s1.json").exists()


def test_an_unknown_sizing_is_refused_with_the_ones_there_are(tmp_path: Path) -> None:
    output = run_bench(tmp_path, "s1", "--out", str(tmp_path / "out"), "--sizing", "huge")
    assert "unknown sizing 'huge'; choose from light, heavy" in output, output
    assert "Traceback" not in output
    assert not (tmp_path / "out" / "s1.json").exists()
