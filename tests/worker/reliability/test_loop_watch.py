"""The loop watch on a virtual clock: which rounds are stalls, under which phase, and what is logged."""

from __future__ import annotations

import logging

import pytest

from cadenza.worker.reliability.loop_watch import FETCH, PHASES, LoopWatch

RUN = PHASES.index("run")
CHECKPOINT = PHASES.index("checkpoint")


def play(watch: LoopWatch, start: float, took: dict[str, float]) -> float:
    """Mark one round that spends ``took[phase]`` seconds in each named phase; returns its end."""
    now = start
    watch.marks[0] = now
    for i, phase in enumerate(PHASES):
        now += took.get(phase, 0.0)
        watch.marks[i + 1] = now
    return now


def test_a_round_under_the_threshold_is_no_stall() -> None:
    watch = LoopWatch(0.1)
    play(watch, 5.0, {"fetch": 0.02, "run": 0.05, "checkpoint": 0.0299})
    assert watch.end(waited=False, queued=10) is False
    assert sum(watch.stalls) == 0
    assert sum(watch.seconds) == 0.0


def test_a_stall_counts_under_its_longest_phase_with_the_whole_busy_time() -> None:
    watch = LoopWatch(0.1)
    play(watch, 5.0, {"fetch": 0.01, "run": 0.03, "checkpoint": 0.2})
    assert watch.end(waited=False, queued=10) is True
    assert watch.stalls[CHECKPOINT] == 1
    assert sum(watch.stalls) == 1
    assert watch.seconds[CHECKPOINT] == pytest.approx(0.24)
    assert watch.counts()[("checkpoint",)] == 1
    assert watch.counts()[("run",)] == 0
    assert set(watch.counts()) == {(phase,) for phase in PHASES}
    assert watch.stalled_seconds()[("checkpoint",)] == pytest.approx(0.24)


def test_a_fetch_that_waited_for_records_is_not_busy_time() -> None:
    watch = LoopWatch(0.1)
    play(watch, 0.0, {"fetch": 0.5, "run": 0.01})
    assert watch.end(waited=True, queued=0) is False
    play(watch, 1.0, {"fetch": 0.5, "run": 0.01})
    assert watch.end(waited=False, queued=3) is True  # records were queued: the fetch held them
    assert watch.stalls[FETCH] == 1
    play(watch, 2.0, {"fetch": 0.5, "admit": 0.15, "run": 0.01})
    assert watch.end(waited=True, queued=0) is True  # a waited fetch neither counts nor is the phase
    assert watch.stalls[PHASES.index("admit")] == 1
    assert watch.seconds[PHASES.index("admit")] == pytest.approx(0.16)


def test_stalls_are_logged_at_most_once_per_interval_saying_how_many_were_not(
    caplog: pytest.LogCaptureFixture,
) -> None:
    watch = LoopWatch(0.1, log_every=10.0)
    asked: list[int] = []

    def slowest() -> str:
        asked.append(1)
        return "slowest quantum: p/map partition 3, 180 ms"

    caplog.set_level(logging.WARNING, logger="cadenza.worker")
    end = play(watch, 100.0, {"run": 0.2, "fetch": 0.01})
    watch.end(waited=False, queued=42, run_detail=slowest)
    for start in (end + 1.0, end + 2.0, end + 3.0):
        play(watch, start, {"run": 0.2})
        watch.end(waited=False, queued=1, run_detail=slowest)
    play(watch, end + 10.5, {"checkpoint": 0.3})
    watch.end(waited=False, queued=7, run_detail=slowest)
    lines = [r.getMessage() for r in caplog.records if "stalled" in r.getMessage()]
    assert len(lines) == 2
    assert lines[0].startswith(
        "the worker's loop stalled for 210 ms with 42 records queued, most of it in run"
    )
    assert "slowest quantum: p/map partition 3, 180 ms" in lines[0]
    assert "fetch 10, run 200" in lines[0]
    assert "more since" not in lines[0]
    assert "most of it in checkpoint (ms: checkpoint 300); 3 more since the last such line" in lines[1]
    assert len(asked) == 1  # the run's detail is asked only for a logged stall spent running
    assert watch.stalls[RUN] == 4
    assert watch.stalls[CHECKPOINT] == 1


@pytest.mark.parametrize("threshold", [0.0, -1.0, float("nan"), float("inf")])
def test_a_threshold_must_be_a_positive_number(threshold: float) -> None:
    with pytest.raises(ValueError, match="stall threshold"):
        LoopWatch(threshold)
