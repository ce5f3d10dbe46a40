"""``count_hot_path.py`` reads callgrind's per-thread files and takes the main thread's totals, and
turns two runs into a per-record figure; both are checked here on files written like callgrind's."""

from __future__ import annotations

from pathlib import Path

import pytest
from count_hot_path import main_thread_events, per_record


def _write(path: Path, events: str, summary: str) -> None:
    path.write_text(
        f"# callgrind format\nversion: 1\ncreator: callgrind-3.19.0\nevents: {events}\n"
        f"fn=(1) main\n0 5 1\nsummary: {summary}\ntotals: {summary}\n"
    )


def test_the_main_thread_file_is_read_and_other_threads_are_not(tmp_path: Path) -> None:
    _write(tmp_path / "callgrind.4242.out-01", "Ir Bc Bcm", "1000 200 30")
    _write(tmp_path / "callgrind.4242.out-02", "Ir Bc Bcm", "999999 1 1")
    assert main_thread_events(tmp_path) == {"Ir": 1000, "Bc": 200, "Bcm": 30}


def test_a_file_without_a_summary_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "callgrind.1.out-01").write_text("events: Ir\n")
    with pytest.raises(RuntimeError, match="no summary"):
        main_thread_events(tmp_path)


def test_per_record_is_the_difference_over_the_records_between_the_runs() -> None:
    low = {"Ir": 1_000_000 + 500 * 90_000, "D1mr": 7 + 500 * 1_200}
    high = {"Ir": 1_000_000 + 2_500 * 90_000, "D1mr": 7 + 2_500 * 1_200}
    assert per_record(low, high, 2_000) == {"Ir": 90_000, "D1mr": 1_200}


def test_runs_that_counted_different_events_are_refused() -> None:
    with pytest.raises(ValueError, match="different events"):
        per_record({"Ir": 1}, {"Ir": 2, "Bc": 3}, 1)
