"""The demo's closing table says plainly, per policy and tenant, whether the target was met, and
warns about a repetition that ran on a machine that lost capacity (no broker: a made-up result)."""

from __future__ import annotations

import pytest

from cadenza.cli import demo
from cadenza.cli.console import console
from cadenza.demo import s1


def test_the_table_says_met_or_missed_and_warns_about_an_overloaded_run(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Wide enough that no cell wraps. The shared console reads COLUMNS once, when the first test that
    # imports it runs, so the width is set on the console itself: the test must not depend on order.
    monkeypatch.setattr(console, "_width", 220)

    def run(latencies: list[float], sustained: float) -> dict[str, object]:
        ls = s1.tenant_stats(latencies, expected=100, target=0.3, records=100, seconds=10.0)
        ba = s1.tenant_stats([1.0] * 100, expected=100, target=5.0, records=100, seconds=10.0)
        return {"LS": ls, "BA": ba, "load": s1.actual_load(0.75, 750.0, sustained, 1000.0)}

    result = {
        "systems": {
            "fifo": s1.median_run([run([0.1] * 50 + [2.0] * 50, 1000.0)]),
            "cameo": s1.median_run([run([0.1] * 100, 500.0)]),
        }
    }
    demo._print_results(s1, result, 0.75)
    out = capsys.readouterr().out
    lines = out.splitlines()
    fifo_ls = next(line for line in lines if "fifo" in line and "LS" in line)
    cameo_ls = next(line for line in lines if "cameo" in line and "LS" in line)
    assert "MISSED: 50% within 300 ms" in fifo_ls
    assert "MET: 100% within 300 ms" in cameo_ls
    assert sum("MET: 100% within 5,000 ms" in line for line in lines) == 2  # BA, both policies
    assert "cameo: this machine ran less than 80%" in out and "load 1.50, not 0.75" in out
    assert "fifo: this machine" not in out
