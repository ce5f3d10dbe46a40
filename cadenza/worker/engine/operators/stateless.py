"""Stateless steps: map, filter, flat_map and branch."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cadenza.operators import Window
from cadenza.worker.engine.dead_letter import DeadLetters
from cadenza.worker.engine.operators.base import Operator
from cadenza.worker.engine.unit import Unit

__all__ = ["BranchOp", "FilterOp", "FlatMapOp", "MapOp"]


class _FunctionOp(Operator):
    """A step that applies one user function and passes its outcome to one downstream operator."""

    __slots__ = ("dead", "fn", "next")

    def __init__(self, node_id: str, fn: Callable[[Any], Any], next: Operator, dead: DeadLetters) -> None:
        super().__init__(node_id)
        self.fn = fn
        self.next = next
        self.dead = dead


class MapOp(_FunctionOp):
    __slots__ = ()

    def process(self, unit: Unit, key: Any, value: Any, event_time: float, window: Window | None) -> None:
        try:
            out = self.fn(value)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:
            self.dead.function_failed(unit, self.node_id, exc)
            return
        self.next.process(unit, key, out, event_time, window)


class FilterOp(_FunctionOp):
    __slots__ = ()

    def process(self, unit: Unit, key: Any, value: Any, event_time: float, window: Window | None) -> None:
        try:
            keep = bool(self.fn(value))  # truth-testing is the user's too (a numpy array refuses)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:
            self.dead.function_failed(unit, self.node_id, exc)
            return
        if keep:
            self.next.process(unit, key, value, event_time, window)


class FlatMapOp(_FunctionOp):
    """Runs the user function to completion before emitting, so a generator that raises halfway emits
    nothing: the record is dead-lettered whole instead of half-processed."""

    __slots__ = ()

    def process(self, unit: Unit, key: Any, value: Any, event_time: float, window: Window | None) -> None:
        try:
            outs = list(self.fn(value))
        except KeyboardInterrupt:
            raise
        except BaseException as exc:
            self.dead.function_failed(unit, self.node_id, exc)
            return
        following = self.next
        for out in outs:
            following.process(unit, key, out, event_time, window)


class BranchOp(Operator):
    """The first port whose predicate holds gets the record; none holding drops it."""

    __slots__ = ("dead", "ports", "predicates")

    def __init__(
        self,
        node_id: str,
        predicates: tuple[Callable[[Any], bool], ...],
        ports: tuple[Operator, ...],
        dead: DeadLetters,
    ) -> None:
        super().__init__(node_id)
        if len(predicates) != len(ports):
            raise ValueError("a branch needs one downstream per predicate")
        self.predicates = predicates
        self.ports = ports
        self.dead = dead

    def process(self, unit: Unit, key: Any, value: Any, event_time: float, window: Window | None) -> None:
        for predicate, port in zip(self.predicates, self.ports, strict=True):
            try:
                taken = bool(predicate(value))
            except KeyboardInterrupt:
                raise
            except BaseException as exc:
                self.dead.function_failed(unit, self.node_id, exc)
                return
            if taken:
                port.process(unit, key, value, event_time, window)
                return
