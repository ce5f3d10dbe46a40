"""The demo's closing tables: every phase in the order it ran, then each policy's verdict over its
phases at the load asked for, saying plainly which phase was off-load and left out (no broker: a
made-up result)."""

from __future__ import annotations

from typing import Any

import pytest

from cadenza.cli import demo
from cadenza.cli.console import console
from cadenza.demo import s1_results


def _phase(number: int, ls_latencies: list[float], run_ms: float) -> dict[str, Any]:
    ls = s1_results.tenant_stats(ls_latencies, expected=100, target=0.3, records=100, seconds=10.0)
    ba = s1_results.tenant_stats([1.0] * 100, expected=100, target=5.0, records=100, seconds=10.0)
    load = s1_results.actual_load(0.75, 750.0, 1000.0, 1000.0, run_s=run_ms / 1000, calibrated_run_s=0.005)
    cpu = {"wall_s": 10.0, "broker_s": 1.5, "broker_cores": 0.15}
    return {"phase": number, "LS": ls, "BA": ba, "load": load, "cpu": cpu, "speed": {"relative": 1.0}}


def test_the_tables_show_every_phase_and_leave_an_off_load_phase_out_of_the_verdict(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Wide enough that no cell wraps. The shared console reads COLUMNS once, when the first test that
    # imports it runs, so the width is set on the console itself: the test must not depend on order.
    monkeypatch.setattr(console, "_width", 250)
    runs = {
        "fifo": [_phase(1, [0.1] * 50 + [2.0] * 50, 5.0), _phase(4, [0.1] * 40 + [2.0] * 60, 5.1)],
        # Phase 3 ran its jobs in 7 ms against 5 at calibration: load 1.05, off by more than 10%.
        "cameo": [_phase(2, [0.1] * 100, 5.0), _phase(3, [2.0] * 100, 7.0)],
    }
    demo._print_results({"runs": runs}, 0.75)
    out = capsys.readouterr().out
    lines = out.splitlines()
    phase_rows = [line for line in lines if line.startswith("│") and line.split("│")[1].strip().isdigit()]
    assert [row.split("│")[1].strip() for row in phase_rows] == ["1", "2", "3", "4"]
    assert "1.05 OFF" in phase_rows[2] and "0.15 core" in phase_rows[0]
    assert "phase 3 (cameo) ran at BA load 1.05, not 0.75" in out
    verdicts = {
        (row.split("│")[1].strip(), row.split("│")[2].strip()): row
        for row in lines
        if "MET" in row or "MISSED" in row
    }
    assert "MISSED: 45.0% within 300 ms" in verdicts[("fifo", "LS")]  # 90 of 200 over phases 1 and 4
    assert "MET: 100.0% within 300 ms" in verdicts[("cameo", "LS")]  # phase 3 left out
    assert [cell.strip() for cell in verdicts[("cameo", "LS")].split("│")][4:7] == ["100/100", "100", "2"]
    assert "MET: 100.0% within 5,000 ms" in verdicts[("cameo", "BA")]
