"""The entry of a sub-topology that reads a repartition topic: progress records bypass the steps.

A progress record (see :mod:`cadenza.worker.wire`) carries no value, only how far an upstream
partition got. It must reach the stateful steps (windows, join inputs) in offset order with the
records, so it is queued and run like one, but it must not meet a user function on the way: this
operator hands it straight to every stateful step of the task and passes records on unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cadenza.operators import Window
from cadenza.worker.operators.base import Operator
from cadenza.worker.operators.stateful import StatefulStep
from cadenza.worker.unit import Unit

__all__ = ["ProgressGate"]


class ProgressGate(Operator):
    __slots__ = ("next", "steps")

    def __init__(self, node_id: str, next: Operator, steps: Sequence[StatefulStep]) -> None:
        super().__init__(node_id)
        self.next = next
        self.steps = tuple(steps)

    def process(self, unit: Unit, key: Any, value: Any, event_time: float, window: Window | None) -> None:
        origin = unit.origin
        if origin is not None and origin[1] < 0:
            for step in self.steps:
                step.progress(unit, origin[0], event_time)
            return
        self.next.process(unit, key, value, event_time, window)
