"""The hang watchdog without threads or sleeping: its decisions on a given clock, how it finds the
running record in the quantum loop's frame, and the worker settings it is measured against."""

from __future__ import annotations

import sys
import time

import pytest

from cadenza import Pipeline
from cadenza.errors import ConfigError
from cadenza.settings import KafkaSettings
from cadenza.worker import Worker
from cadenza.worker.config import WorkerConfig
from cadenza.worker.reliability.hang_watch import HangEvent, HangTracker, running_unit

KEY = ("in", 0)


def test_the_hang_tracker_pins_past_the_timeout_and_declares_death_past_the_poll_interval() -> None:
    tracker = HangTracker(hang_timeout=2.0, poll_interval=5.0)
    call = (KEY, 7, 100.0)
    assert tracker.observe(100.5, call) == []
    assert tracker.observe(102.0, call) == [HangEvent.PIN]
    assert tracker.observe(103.0, call) == []
    assert tracker.observe(104.0, None) == [HangEvent.RETURNED]  # back before the poll interval
    other = (KEY, 8, 110.0)
    assert tracker.observe(116.0, other) == [HangEvent.PIN, HangEvent.DEAD]
    assert tracker.observe(200.0, None) == []  # a dead call's return clears nothing
    assert tracker.observe(200.0, (KEY, 9, 199.9)) == []


class _Unit:
    topic = "in"
    partition = 0
    offset = 42


def _quantum_loop(units: list[_Unit], probe: list[object]) -> None:
    """Shaped like the worker's quantum loop: the locals the watchdog reads."""
    perf = time.perf_counter
    for unit in units:  # noqa: B007 - read from the frame, as in the worker
        started = perf()
        probe.append(running_unit(sys._getframe(), _quantum_loop.__code__))
        finished = perf()
        del finished
    del started, unit


def test_the_watchdog_reads_the_running_record_from_the_quantum_loop_frame() -> None:
    probe: list[object] = []
    _quantum_loop([_Unit(), _Unit()], probe)
    assert len(probe) == 2
    for seen in probe:
        assert isinstance(seen, tuple)
        assert seen[0] == ("in", 0) and seen[1] == 42 and isinstance(seen[2], float)
    assert running_unit(sys._getframe(), _quantum_loop.__code__) is None  # not inside the loop


def test_the_hang_timeout_must_lie_below_the_poll_interval_which_must_cover_the_session() -> None:
    pipeline = Pipeline("hang-settings", tenant="t", latency_target="1s")
    pipeline.source("in").map(lambda v: v).sink("out")
    settings = KafkaSettings(bootstrap_servers="127.0.0.1:1", session_timeout_ms=6000)
    assert Worker([pipeline], settings, WorkerConfig(max_poll_interval=10.0)).config.hang_seconds == 8.0
    for poll, hang in ((10.0, 10.0), (10.0, 0.0)):
        with pytest.raises(ConfigError, match="hang_timeout"):
            WorkerConfig.load(max_poll_interval=poll, hang_timeout=hang)
    with pytest.raises(ConfigError, match="max_poll_interval"):  # below the 6 s session timeout
        Worker([pipeline], settings, WorkerConfig(max_poll_interval=5.0, hang_timeout=1.0))
