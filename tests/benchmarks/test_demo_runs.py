"""The ten-run check of `cadenza demo` (issue 51): every phase summarised, and the targets fail on a
failed run, a policy with no phase counted, or a phase whose broker took more than 0.2 of a core."""

from __future__ import annotations

from typing import Any

from demo_runs import judge, markdown, summarise

from cadenza.demo import s1_results


def _phase(number: int, ls_met: int, *, broker: float = 0.15, run_ms: float = 5.0) -> dict[str, Any]:
    ls = s1_results.tenant_stats(
        [0.1] * ls_met + [1.0] * (100 - ls_met), expected=100, target=0.3, records=100, seconds=1
    )
    ba = s1_results.tenant_stats([1.0] * 50, expected=50, target=5.0, records=50, seconds=1)
    load = s1_results.actual_load(0.75, 100.0, 130.0, 130.0, run_s=run_ms / 1000, calibrated_run_s=0.005)
    cpu = {"broker_cores": broker}
    return {"phase": number, "LS": ls, "BA": ba, "load": load, "cpu": cpu, "speed": {"relative": 1.0}}


def _run(**cameo: Any) -> dict[str, Any]:
    return summarise(
        {"runs": {"fifo": [_phase(1, 40), _phase(4, 60)], "cameo": [_phase(2, 100, **cameo), _phase(3, 100)]}}
    )


def test_a_good_run_meets_every_target_and_shows_every_phase() -> None:
    run = _run()
    assert [phase["phase"] for phase in run["phases"]] == [1, 2, 3, 4]
    assert run["policies"]["fifo"]["LS"] == {"met": 100, "expected": 200, "ratio": 0.5}
    targets = judge([run, run])
    assert targets["cameo_meets_both_in_every_run"] and targets["cameo_met_both"] == 2
    assert targets["fifo_misses_ls_in_every_run"] and targets["broker_at_most_0.2_core_in_every_run"]
    table = markdown([run])
    assert "| 1 | 2 | cameo | 100% | 0.75 | 100/100 (100.0%) |" in table
    assert "| 1 | 40/100 (40.0%) |" not in table and "100/200 (50.0%)" in table


def test_a_failed_run_a_busy_broker_or_a_policy_without_a_counted_phase_fails_the_targets() -> None:
    busy = _run(broker=0.21)
    assert not judge([_run(), busy])["broker_at_most_0.2_core_in_every_run"]
    failed = {"error": "exit 1, see run2.txt", "seconds": 3.0}
    assert not judge([_run(), failed])["cameo_meets_both_in_every_run"]
    assert "| 2 | - | failed: exit 1" in markdown([_run(), failed])
    # Both cameo phases off-load: cameo has no result in that run, which is not a pass.
    off = summarise(
        {"runs": {"fifo": [_phase(1, 40)], "cameo": [_phase(2, 100, run_ms=7.0), _phase(3, 100, run_ms=7.0)]}}
    )
    assert off["policies"]["cameo"]["counted"] == []
    verdict = judge([off])
    assert not verdict["cameo_meets_both_in_every_run"] and verdict["off_load_phases"] == 2
