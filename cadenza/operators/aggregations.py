"""Aggregators for windowed aggregation: an accumulator, folded one value at a time.

Each aggregator is an object with ``init() -> A``, ``add(acc, value) -> A``, ``merge(a, b) -> A`` and
``result(acc) -> R``. ``merge`` exists because session windows merge when a record bridges two of
them, and Dirigo-style helpers merge partial state.

Accumulators are always plain data (numbers, ``None``, lists): they are written to a changelog topic
and restored from it, possibly through JSON, which turns tuples into lists; so every aggregator here
accepts either back. ``add`` and ``merge`` return a new accumulator and never mutate the old one, so a
store may hand out its own objects.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Generic, Protocol, TypeVar, overload

from cadenza.errors import ConfigError

__all__ = ["Aggregate", "Aggregator", "Count", "Max", "Mean", "Min", "Sum", "aggregate"]

V = TypeVar("V")
A = TypeVar("A")
R = TypeVar("R")
V_contra = TypeVar("V_contra", contravariant=True)
R_co = TypeVar("R_co", covariant=True)


class Aggregator(Protocol[V_contra, A, R_co]):
    """How a window folds its values; see the module docstring for the accumulator rules."""

    def init(self) -> A: ...

    def add(self, acc: A, value: V_contra) -> A: ...

    def merge(self, a: A, b: A) -> A: ...

    def result(self, acc: A) -> R_co: ...


class Count:
    """Number of values."""

    __slots__ = ()

    def init(self) -> int:
        return 0

    def add(self, acc: int, value: object) -> int:
        return acc + 1

    def merge(self, a: int, b: int) -> int:
        return a + b

    def result(self, acc: int) -> int:
        return acc


class Sum(Generic[V]):
    """Sum of the values, or of ``of(value)``; ints stay exact ints."""

    __slots__ = ("_of",)

    @overload
    def __init__(self: Sum[float], of: None = None) -> None: ...
    @overload
    def __init__(self, of: Callable[[V], float]) -> None: ...
    def __init__(self, of: Callable[[V], float] | None = None) -> None:
        self._of = of

    def init(self) -> float:
        return 0

    def add(self, acc: float, value: V) -> float:
        of = self._of
        return acc + (of(value) if of is not None else value)  # type: ignore[operator]

    def merge(self, a: float, b: float) -> float:
        return a + b

    def result(self, acc: float) -> float:
        return acc


class _Extremum(Generic[V]):
    """Min and Max share everything but the comparison; ``None`` stands for "no value".

    A ``None`` item (``of(value)`` returning ``None``) is skipped by :meth:`add` as :meth:`merge`
    skips a ``None`` accumulator, wherever it comes in the window: so folding a value in equals merging
    in its one-value accumulator, which is what lets lessees fold records apart (see
    :mod:`cadenza.operators.lift`), and the result does not depend on where in the window it came.
    """

    __slots__ = ("_of",)

    @overload
    def __init__(self: _Extremum[Any], of: None = None) -> None: ...
    @overload
    def __init__(self, of: Callable[[V], Any]) -> None: ...
    def __init__(self, of: Callable[[V], Any] | None = None) -> None:
        self._of = of

    @staticmethod
    def _wins(candidate: Any, incumbent: Any) -> bool:
        raise NotImplementedError

    def init(self) -> Any:
        return None

    def add(self, acc: Any, value: V) -> Any:
        item = self._of(value) if self._of is not None else value
        if item is None:
            return acc
        return item if acc is None or self._wins(item, acc) else acc

    def merge(self, a: Any, b: Any) -> Any:
        if a is None:
            return b
        if b is None:
            return a
        return b if self._wins(b, a) else a

    def result(self, acc: Any) -> Any:
        return acc


class Min(_Extremum[V]):
    """Smallest value (or ``of(value)``), ``None`` items left out; ``None`` for a window that saw none."""

    __slots__ = ()

    @staticmethod
    def _wins(candidate: Any, incumbent: Any) -> bool:
        return bool(candidate < incumbent)


class Max(_Extremum[V]):
    """Largest value (or ``of(value)``), ``None`` items left out; ``None`` for a window that saw none."""

    __slots__ = ()

    @staticmethod
    def _wins(candidate: Any, incumbent: Any) -> bool:
        return bool(candidate > incumbent)


class Mean(Generic[V]):
    """Arithmetic mean; the accumulator is ``[sum, count]`` so partial means merge exactly."""

    __slots__ = ("_of",)

    @overload
    def __init__(self: Mean[float], of: None = None) -> None: ...
    @overload
    def __init__(self, of: Callable[[V], float]) -> None: ...
    def __init__(self, of: Callable[[V], float] | None = None) -> None:
        self._of = of

    def init(self) -> list[float]:
        return [0, 0]

    def add(self, acc: Sequence[float], value: V) -> list[float]:
        of = self._of
        total, count = acc
        return [total + (of(value) if of is not None else value), count + 1]  # type: ignore[operator]

    def merge(self, a: Sequence[float], b: Sequence[float]) -> list[float]:
        return [a[0] + b[0], a[1] + b[1]]

    def result(self, acc: Sequence[float]) -> float | None:
        total, count = acc
        return total / count if count else None


class Aggregate(Generic[V, A, R]):
    """A user aggregator from functions; ``result`` defaults to returning the accumulator.

    ``merge`` may be ``None``: only session windows merge accumulators, and a
    :class:`~cadenza.operators.WindowedAggregation` over session windows refuses such an aggregator
    when it is built (see :attr:`mergeable`). Calling :meth:`merge` on it raises :class:`ConfigError`.
    """

    __slots__ = ("_add", "_init", "_merge", "_result")

    def __init__(
        self,
        init: Callable[[], A],
        add: Callable[[A, V], A],
        merge: Callable[[A, A], A] | None = None,
        result: Callable[[A], R] | None = None,
    ) -> None:
        if not callable(init):
            raise ConfigError(
                f"aggregate(init=...) takes a zero-argument function such as `lambda: 0` (got {init!r}), "
                "so that no two windows share one mutable accumulator"
            )
        if merge is not None and not callable(merge):
            raise ConfigError(
                f"aggregate(merge=...) takes a function of two accumulators or None (got {merge!r})"
            )
        self._init = init
        self._add = add
        self._merge = merge
        self._result = result

    @property
    def mergeable(self) -> bool:
        """Whether this aggregator has a ``merge`` function (session windows need one)."""
        return self._merge is not None

    def init(self) -> A:
        return self._init()

    def add(self, acc: A, value: V) -> A:
        return self._add(acc, value)

    def merge(self, a: A, b: A) -> A:
        if self._merge is None:
            raise ConfigError(
                "this aggregate() has no merge function; only session windows need one, pass merge=..."
            )
        return self._merge(a, b)

    def result(self, acc: A) -> R:
        if self._result is None:
            return acc  # type: ignore[return-value]
        return self._result(acc)


def aggregate(
    init: Callable[[], A],
    add: Callable[[A, V], A],
    merge: Callable[[A, A], A] | None = None,
    result: Callable[[A], R] | None = None,
) -> Aggregate[V, A, R]:
    """Build a user aggregator; keep accumulators plain data so they can be changelogged.

    ``merge`` is needed only for session windows (which refuse an aggregator without one up front).
    """
    return Aggregate(init, add, merge, result)
