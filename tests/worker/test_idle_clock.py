"""The idle clock stands still while the worker is stalled, so a stall times no input out."""

from __future__ import annotations

from cadenza.operators.event_time import WatermarkTracker
from cadenza.worker.idle_clock import IdleClock


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
