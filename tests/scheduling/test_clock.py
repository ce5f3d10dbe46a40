"""Clocks: the virtual one only moves forward and only when told."""

from __future__ import annotations

import time

import pytest

from cadenza.scheduling import Clock, SystemClock, VirtualClock


def test_virtual_clock_moves_only_when_told() -> None:
    clock = VirtualClock(5.0)
    assert clock.now() == 5.0
    assert clock.advance(0.25) == 5.25
    clock.set(7.0)
    assert clock.now() == 7.0
    clock.set(7.0)
    assert clock.now() == 7.0
    assert repr(clock) == "VirtualClock(7.0)"


@pytest.mark.parametrize("step", [-0.001, float("nan"), float("inf")])
def test_virtual_clock_refuses_bad_steps(step: float) -> None:
    clock = VirtualClock(1.0)
    with pytest.raises(ValueError, match="advance"):
        clock.advance(step)
    with pytest.raises(ValueError, match="cannot move"):
        clock.set(1.0 + step if step < 0 else step)
    assert clock.now() == 1.0


def test_virtual_clock_start_must_be_finite() -> None:
    with pytest.raises(ValueError, match="finite"):
        VirtualClock(float("nan"))


def test_system_clock_is_wall_time() -> None:
    clock = SystemClock()
    before = time.time()
    now = clock.now()
    assert before <= now <= time.time()
    assert isinstance(clock, Clock)
    assert isinstance(VirtualClock(), Clock)
