"""Progress at a sub-topology's entry: progress records bypass the steps, and every record counts.

:class:`ProgressGate`, the entry of a sub-topology that reads a repartition topic: a progress
record (see :mod:`cadenza.worker.wire`) carries no value, only how far an upstream partition got.
It must reach the stateful steps (windows, join inputs) in offset order with the records, so it is
queued and run like one, but it must not meet a user function on the way: the gate hands it
straight to every stateful step of the task and passes records on unchanged.

:class:`ProgressTap`: a key_by reached from the entry through stateless steps only (map, filter,
flat_map, branch) is handed records with the event time they entered with, so how far its input
partition got is known at the entry, from every record run there: also from those a filter or a
branch drops, or a user function dead-letters, before the key_by. Without this, a source partition
whose records a filter drops for a while would send no progress, and every window downstream would
wait for it until the idle timeout, after which its next record passing the filter could be late.
A record only claims how far its own input partition got, which the watermark rule allows (see
``docs/watermarks.md``: the bound on disorder is per source partition, filtered records included).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cadenza.operators import Window
from cadenza.worker.operators.base import Operator
from cadenza.worker.operators.routing import KeyByOp
from cadenza.worker.operators.stateful import StatefulStep
from cadenza.worker.unit import Unit

__all__ = ["ProgressGate", "ProgressTap"]


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


class ProgressTap(Operator):
    __slots__ = ("keyed", "next")

    def __init__(self, node_id: str, next: Operator, keyed: Sequence[KeyByOp]) -> None:
        super().__init__(node_id)
        self.next = next
        self.keyed = tuple(keyed)

    def process(self, unit: Unit, key: Any, value: Any, event_time: float, window: Window | None) -> None:
        partition = unit.partition
        for step in self.keyed:
            step.advance(partition, event_time)
        self.next.process(unit, key, value, event_time, window)
