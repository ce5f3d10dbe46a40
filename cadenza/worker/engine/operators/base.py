"""The operator calling convention of the run stage.

An operator gets ``(unit, key, value, event_time, window)`` and calls the next operator with what it
emits. Passing the record's parts as arguments (rather than a new object per step) keeps the path
allocation-free for map/filter chains; ``unit`` rides along unchanged so a step that fails can
dead-letter the consumed record, and ``window`` is set only on window results.

A user function that raises is caught around that call alone, so an exception in a later step is
never blamed on an earlier one.
"""

from __future__ import annotations

from typing import Any

from cadenza.operators import Window
from cadenza.worker.engine.unit import Unit

__all__ = ["Fanout", "Operator"]


class Operator:
    """One step; ``node_id`` is the step's id in the compiled graph."""

    __slots__ = ("node_id",)

    def __init__(self, node_id: str) -> None:
        self.node_id = node_id

    def process(self, unit: Unit, key: Any, value: Any, event_time: float, window: Window | None) -> None:
        raise NotImplementedError


class Fanout(Operator):
    """A stream used by several downstream steps: each gets every record, in declaration order."""

    __slots__ = ("outs",)

    def __init__(self, node_id: str, outs: tuple[Operator, ...]) -> None:
        super().__init__(node_id)
        self.outs = outs

    def process(self, unit: Unit, key: Any, value: Any, event_time: float, window: Window | None) -> None:
        for out in self.outs:
            out.process(unit, key, value, event_time, window)


def chain(node_id: str, outs: list[Operator]) -> Operator:
    """The single operator a step hands its output to: the consumer itself, or a fan-out to several."""
    if len(outs) == 1:
        return outs[0]
    return Fanout(node_id, tuple(outs))
