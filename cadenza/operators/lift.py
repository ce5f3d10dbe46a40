"""Window aggregation with lessees: records are folded apart into partial accumulators, and merged.

A window aggregate declared with ``parallel=`` does the costly part of ``add`` (the user's extractor
and fold) off the worker's thread: a lessee runs :class:`Lift` on each record's value, giving the
record's own accumulator ``add(init(), value)``, and the window, on the worker's thread, merges that
into the windows the record falls in (:class:`LiftedAggregator`) in offset order, as it would have
added the value. Results are then exactly those of the plain window as long as two laws hold, which
the built-in aggregators satisfy (and which a user's ``aggregate(..., merge=...)`` must):

* the lift law, ``add(acc, v) == merge(acc, add(init(), v))``: folding a value in equals merging in
  its one-value accumulator;
* ``init()`` is ``merge``'s identity, ``merge(init(), p) == p``: a window a record opens starts from
  a fresh accumulator of its own (never the partial itself, which the record's other windows share).

``merge`` must also be associative and commutative for lessees to combine partials in any order; the
window does not need it today (it merges one record's partial at a time, in offset order), but a
partial may one day hold several records.

What reaches the window is a :class:`Lifted`: the partial and the record's own value, which the
late topic shows just as it would without lessees. A lift that raised arrives as a
:class:`LiftFailure` in place of the partial and is raised again where the window would have called
``add``, so it is dead-lettered exactly when the plain window would have (a record late for every one
of its windows goes to the late topic instead, as ``add`` is never called for it).

Sliding windows keep buffering the records' values, not their partials, and fold the buffered values
with the plain ``add`` when a record opens a window (merging only that record's partial): so their
state is the plain window's, a step whose ``parallel`` changed restores the other's changelog, and a
buffered value whose ``add`` raises fails the windows opened over it as it would without lessees. It
also means lessees take less off the worker's thread for sliding windows than for the other kinds.

Pure logic: nothing here knows about processes or threads; the worker's runtime ships :class:`Lift`
to its lessees (pickled, for process lessees) and builds the :class:`Lifted` values.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, NamedTuple, TypeVar

from cadenza.errors import ConfigError
from cadenza.operators.aggregations import Aggregator

__all__ = ["Lift", "LiftFailure", "Lifted", "LiftedAggregator"]

V = TypeVar("V")
A = TypeVar("A")
R = TypeVar("R")


class Lift(Generic[V, A]):
    """``add(init(), value)``: one record's partial accumulator, what a lessee computes.

    A class rather than a closure so that it pickles whenever ``init`` and ``add`` do (the built-in
    aggregators' bound methods do when their extractor does): that is what a process lessee receives,
    and what the declaration checks.
    """

    __slots__ = ("add", "init")

    def __init__(self, init: Callable[[], A], add: Callable[[A, V], A]) -> None:
        self.init = init
        self.add = add

    def __call__(self, value: V) -> A:
        return self.add(self.init(), value)

    def __repr__(self) -> str:
        return f"Lift(init={_name(self.init)}, add={_name(self.add)})"


def _name(fn: object) -> str:
    """A function as a user would recognise it in a message (a built-in's extractor, when it has one)."""
    owner = getattr(fn, "__self__", None)
    of = getattr(owner, "_of", None)
    name = getattr(fn, "__qualname__", None) or type(fn).__name__
    return f"{name} of {getattr(of, '__qualname__', of)!s}" if of is not None else str(name)


class LiftFailure:
    """What a lift raised, standing in for the partial it did not make; not state (nothing stores it)."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def __repr__(self) -> str:
        return f"LiftFailure({self.error!r})"


class Lifted(NamedTuple):
    """A record as a lifted window receives it: its ``value`` (what the late topic shows) and its
    ``partial`` accumulator, ``Lift(init, add)(value)``, or the :class:`LiftFailure` of that call."""

    value: Any
    partial: Any


class LiftedAggregator(Generic[A, R]):
    """The aggregator of a window whose values are :class:`Lifted` records: ``add`` merges.

    ``init``, ``merge`` and ``result`` are the wrapped aggregator's (:attr:`plain`); ``add(acc, record)``
    is ``merge(acc, record.partial)``, or raises the error of a :class:`LiftFailure`. The window's code
    is the plain one (it calls ``add(init(), record)`` for a new window, that is
    ``merge(init(), partial)``), so lateness, sessions and changelogs take the same paths with or without
    lessees; only sliding windows, which buffer values, have a lifted path of their own.
    """

    __slots__ = ("init", "merge", "plain", "result")

    def __init__(self, aggregator: Aggregator[Any, A, R]) -> None:
        if getattr(aggregator, "mergeable", True) is False:
            raise ConfigError(
                "a window aggregate run on lessees merges partial accumulators, so it needs a merge "
                "function (pass merge=... to aggregate())"
            )
        #: The aggregator lifted: a sliding window folds buffered values with it.
        self.plain = aggregator
        self.init = aggregator.init
        self.merge = aggregator.merge
        self.result = aggregator.result

    @property
    def mergeable(self) -> bool:
        return True

    def add(self, acc: A, record: Lifted) -> A:
        partial = record[1]
        if type(partial) is LiftFailure:
            raise partial.error
        return self.merge(acc, partial)
