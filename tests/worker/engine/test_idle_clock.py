"""The idle clock stands still while the worker is stalled, so a stall times no input out."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cadenza.operators.event_time import WatermarkTracker
from cadenza.worker.engine.idle_clock import IdleClock


class Base:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_the_clock_follows_its_base_outside_stalls_and_stands_still_inside() -> None:
    base = Base()
    clock = IdleClock(base)
    start = clock.now()
    base.t += 5
    assert clock.now() == start + 5
    with clock.stalled():
        base.t += 40
        assert clock.now() == start + 5
        with clock.stalled():  # nested: counted once
            base.t += 10
        assert clock.now() == start + 5
    assert clock.now() == start + 5
    base.t += 2
    assert clock.now() == start + 7


def test_a_stall_longer_than_the_idle_timeout_does_not_time_an_input_out() -> None:
    base = Base()
    clock = IdleClock(base)
    tracker = WatermarkTracker([0, 1], idle_timeout=30.0, clock=clock.now)
    tracker.observe(0, 10.0)
    tracker.observe(1, 10.0)
    with clock.stalled():  # say, a serial replay of partition 0's records
        for step in range(60):
            base.t += 1
            tracker.observe(0, 11.0 + step)
            tracker.watermark()
    assert not tracker.is_idle(1)
    assert tracker.watermark() <= 10.0  # input 1 still holds the watermark back
    base.t += 31  # real silence, the worker reading: now it times out
    tracker.observe(0, 80.0)
    assert tracker.is_idle(1)
    assert tracker.watermark() == 80.0


def test_without_the_stall_the_same_silence_times_the_input_out() -> None:
    """The control: the same 60 s counted on the plain clock does time input 1 out."""
    base = Base()
    tracker = WatermarkTracker([0, 1], idle_timeout=30.0, clock=base)
    tracker.observe(0, 10.0)
    tracker.observe(1, 10.0)
    for step in range(60):
        base.t += 1
        tracker.observe(0, 11.0 + step)
        tracker.watermark()
    assert tracker.is_idle(1)
    assert tracker.watermark() == 70.0  # moved on without input 1


def test_between_fetches_only_the_read_gap_counts() -> None:
    base = Base()
    clock = IdleClock(base, read_gap=1.0)
    start = clock.now()
    clock.fetch_started()
    base.t += 5  # a poll that waits for records: listening, counted in full
    assert clock.now() == start + 5
    clock.fetch_ended()
    base.t += 0.5  # a loop round
    assert clock.now() == start + 5.5
    base.t += 60  # a user function blocks the loop: only the first second of the gap counts
    assert clock.now() == start + 6
    clock.fetch_started()
    assert clock.now() == start + 6
    base.t += 2
    clock.fetch_ended()
    assert clock.now() == start + 8
    base.t += 0.25
    clock.fetch_started()
    assert clock.now() == start + 8.25  # a short gap counts in full


def test_a_stall_inside_a_gap_is_not_cut_twice() -> None:
    base = Base()
    clock = IdleClock(base, read_gap=1.0)
    start = clock.now()
    clock.fetch_started()
    clock.fetch_ended()
    base.t += 0.5
    with clock.stalled():  # 10 s not counted as a stall...
        base.t += 10
        assert clock.now() == start + 0.5
    base.t += 0.25
    assert clock.now() == start + 0.75  # ...and not as gap: 0.75 s of the gap counted so far
    base.t += 3
    assert clock.now() == start + 1.0
    clock.fetch_started()
    base.t += 1
    assert clock.now() == start + 2.0


def test_a_stall_that_spans_fetches_stops_the_clock_throughout() -> None:
    base = Base()
    clock = IdleClock(base, read_gap=1.0)
    start = clock.now()
    clock.stall()  # a restore in the background while the loop goes on fetching
    for _ in range(5):
        clock.fetch_started()
        base.t += 2
        clock.fetch_ended()
        base.t += 3
        assert clock.now() == start
    clock.unstall()
    base.t += 0.5
    assert clock.now() == start + 0.5
    base.t += 5
    assert clock.now() == start + 1.0


def test_a_blocked_loop_times_no_input_out() -> None:
    base = Base()
    clock = IdleClock(base, read_gap=1.0)
    tracker = WatermarkTracker([0, 1], idle_timeout=30.0, clock=clock.now)
    clock.fetch_started()
    clock.fetch_ended()
    tracker.observe(0, 10.0)
    tracker.observe(1, 10.0)
    base.t += 90  # one record's user function blocks for 90 s
    tracker.observe(0, 11.0)
    assert not tracker.is_idle(1)
    assert tracker.watermark() <= 10.0
    for _ in range(40):  # then real silence of input 1 while the worker reads: it times out
        clock.fetch_started()
        base.t += 1
        clock.fetch_ended()
    tracker.observe(0, 50.0)
    assert tracker.is_idle(1)
    assert tracker.watermark() == 50.0


def test_read_gap_must_be_positive() -> None:
    with pytest.raises(ValueError, match="read_gap"):
        IdleClock(read_gap=0.0)


QUARTER = 0.25  # time in quarter seconds: exact in floats, so the clock is compared exactly


EVENTS = st.one_of(st.integers(1, 8), st.sampled_from(["begin", "end", "stall", "unstall"]))


@given(st.integers(1, 12), st.lists(EVENTS, max_size=60))
@settings(max_examples=1000, deadline=None)
def test_the_clock_counts_what_a_quarter_by_quarter_brute_force_counts(
    read_gap: int, events: list[int | str]
) -> None:
    """A quarter counts unless a stall is open, or a gap between fetches is open and has already
    counted ``read_gap`` quarters (``begin``/``end``: a fetch starts/returns; a number: that many
    quarters pass)."""
    base = Base()
    clock = IdleClock(base, read_gap=read_gap * QUARTER)
    start = clock.now()
    depth = 0
    fetching = False
    gap_counted: int | None = None  # None: no gap open (before the first fetch, or inside one)
    counted = 0
    for event in events:
        if isinstance(event, int):
            for _ in range(event):
                if depth == 0 and (gap_counted is None or gap_counted < read_gap):
                    counted += 1
                    if gap_counted is not None:
                        gap_counted += 1
            base.t += event * QUARTER
        elif event == "begin" and not fetching:
            clock.fetch_started()
            fetching, gap_counted = True, None
        elif event == "end" and fetching:
            clock.fetch_ended()
            fetching, gap_counted = False, 0
        elif event == "stall":
            clock.stall()
            depth += 1
        elif event == "unstall" and depth:
            clock.unstall()
            depth -= 1
        assert clock.now() - start == counted * QUARTER


def test_while_a_fetched_record_runs_the_clock_reads_its_fetch_stamp() -> None:
    base = Base()
    clock = IdleClock(base, read_gap=1.0)
    stamp = clock.now()
    base.t += 20
    clock.at = stamp  # the executor, while the record fetched at `stamp` runs
    assert clock.now() == stamp
    clock.at = None
    assert clock.now() == stamp + 20


def test_silence_between_fetch_stamps_times_out_what_silence_between_runs_would_not_and_back() -> None:
    """Input 1's records were fetched 0.2 s apart and ran 5 s apart (queued behind other work):
    measured on the fetch stamps it was never silent; measured when they ran it was."""
    base = Base()
    clock = IdleClock(base)
    stamped = WatermarkTracker([0, 1], idle_timeout=1.0, clock=clock.now)
    timed_on_runs = WatermarkTracker([0, 1], idle_timeout=1.0, clock=base)
    first = clock.now()
    for tracker in (stamped, timed_on_runs):
        clock.at = first
        tracker.observe(0, 1.0)
        tracker.observe(1, 2.0)
        clock.at = None
    ahead, behind = first + 0.1, first + 0.2  # fetched right after: input 0 far ahead, then input 1
    base.t += 5  # the records wait in the buffer
    clock.at = ahead
    stamped.observe(0, 25.0)
    timed_on_runs.observe(0, 25.0)
    assert not stamped.is_idle(1)
    assert stamped.watermark() == 2.0
    assert timed_on_runs.is_idle(1)
    assert timed_on_runs.watermark() == 25.0  # input 1's queued record at 5.0 would be late
    clock.at = behind
    stamped.observe(1, 5.0)
    clock.at = None
    assert stamped.watermark() == 5.0
