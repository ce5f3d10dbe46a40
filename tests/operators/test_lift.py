"""The laws that make a window run on lessees give exactly the plain window's results, for the built-ins.

A lessee computes a record's partial accumulator ``add(init(), v)`` and the window merges it in, so
``merge`` must be associative and commutative (partials may combine in any order), ``init()`` its
identity, and ``add(acc, v) == merge(acc, add(init(), v))`` (the lift law). Accumulators come back from
changelogs as JSON (tuples become lists), so the laws must hold for those too. Equality here is
strict where it matters: the JSON text of the two sides, so an int that became a float would show.

Values are integers and quarter-second floats of bounded size: their sums are exact, so float
addition is associative on them (it is not in general, which is why the lessor merges in offset
order and never reassociates). NaN is left out: ``min``/``max`` of NaN depend on the order by nature.
"""

from __future__ import annotations

import json
import pickle
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cadenza.errors import ConfigError
from cadenza.operators import (
    Aggregator,
    Count,
    Lift,
    Lifted,
    LiftedAggregator,
    LiftFailure,
    Max,
    Mean,
    Min,
    Sum,
    aggregate,
)

NUMBERS = st.one_of(st.integers(-(10**6), 10**6), st.integers(-4000, 4000).map(lambda n: n / 4))
VALUES = st.lists(NUMBERS, max_size=12)
ROUND_TRIP = st.booleans()


def amount(row: dict[str, Any]) -> Any:
    return row["amount"]


def zero() -> int:
    return 0


def plus(acc: int, value: int) -> int:
    return acc + value


def _builtins() -> dict[str, Aggregator[Any, Any, Any]]:
    return {
        "count": Count(),
        "sum": Sum(),
        "min": Min(),
        "max": Max(),
        "mean": Mean(),
        "sum_of": Sum(amount),
        "min_of": Min(amount),
        "max_of": Max(amount),
        "mean_of": Mean(amount),
    }


BUILTINS = _builtins()


def _item(name: str, number: Any) -> Any:
    """The record a built-in reads ``number`` from: itself, or a row its extractor reads."""
    return {"amount": number} if name.endswith("_of") else number


def json_trip(value: Any) -> Any:
    return json.loads(json.dumps(value))


def same(a: Any, b: Any) -> bool:
    """Equal and written alike (``1`` is not ``1.0`` in a changelog or a result)."""
    return bool(a == b) and json.dumps(a) == json.dumps(b)


def accumulator(name: str, numbers: list[Any], through_json: bool) -> Any:
    agg = BUILTINS[name]
    acc = agg.init()
    for number in numbers:
        acc = agg.add(acc, _item(name, number))
        if through_json:
            acc = json_trip(acc)
    return acc


@pytest.mark.parametrize("name", sorted(BUILTINS))
@given(a=VALUES, b=VALUES, c=VALUES, through_json=ROUND_TRIP)
def test_merge_is_associative(
    name: str, a: list[Any], b: list[Any], c: list[Any], through_json: bool
) -> None:
    merge = BUILTINS[name].merge
    x, y, z = (accumulator(name, values, through_json) for values in (a, b, c))
    assert merge(merge(x, y), z) == merge(x, merge(y, z))


@pytest.mark.parametrize("name", sorted(BUILTINS))
@given(a=VALUES, b=VALUES, through_json=ROUND_TRIP)
def test_merge_is_commutative(name: str, a: list[Any], b: list[Any], through_json: bool) -> None:
    merge = BUILTINS[name].merge
    x, y = accumulator(name, a, through_json), accumulator(name, b, through_json)
    assert merge(x, y) == merge(y, x)


@pytest.mark.parametrize("name", sorted(BUILTINS))
@given(values=VALUES, through_json=ROUND_TRIP)
def test_init_is_the_identity_of_merge(name: str, values: list[Any], through_json: bool) -> None:
    agg = BUILTINS[name]
    acc = accumulator(name, values, through_json)
    assert same(agg.merge(agg.init(), acc), acc)
    assert same(agg.merge(acc, agg.init()), acc)


@pytest.mark.parametrize("name", sorted(BUILTINS))
@given(values=VALUES, number=NUMBERS, through_json=ROUND_TRIP, partial_through_json=ROUND_TRIP)
def test_folding_a_value_in_equals_merging_its_lift(
    name: str, values: list[Any], number: Any, through_json: bool, partial_through_json: bool
) -> None:
    """The lift law, with the window's accumulator (and the partial, which a sliding window buffers)
    possibly restored from a changelog."""
    agg = BUILTINS[name]
    acc = accumulator(name, values, through_json)
    partial = Lift(agg.init, agg.add)(_item(name, number))
    if partial_through_json:
        partial = json_trip(partial)
    assert same(agg.add(acc, _item(name, number)), agg.merge(acc, partial))


@pytest.mark.parametrize("name", sorted(BUILTINS))
@given(values=VALUES)
def test_a_fold_of_lifts_is_the_plain_fold(name: str, values: list[Any]) -> None:
    """What a lifted window computes for one window: ``add`` of the lifted aggregator over lifted records."""
    agg = BUILTINS[name]
    lift, lifted = Lift(agg.init, agg.add), LiftedAggregator(agg)
    acc = lifted.init()
    for number in values:
        item = _item(name, number)
        acc = lifted.add(acc, Lifted(item, lift(item)))
    assert same(agg.result(acc), agg.result(accumulator(name, values, False)))


@given(values=VALUES, number=NUMBERS)
def test_a_user_aggregate_with_a_lawful_merge_lifts_too(values: list[Any], number: Any) -> None:
    agg: Aggregator[Any, list[Any], tuple[Any, ...]] = aggregate(
        list, lambda acc, v: sorted([*acc, v]), lambda a, b: sorted(a + b), tuple
    )
    acc = json_trip(_fold(agg, values))
    assert same(agg.add(acc, number), agg.merge(acc, Lift(agg.init, agg.add)(number)))


def _fold(agg: Aggregator[Any, Any, Any], values: list[Any]) -> Any:
    acc = agg.init()
    for value in values:
        acc = agg.add(acc, value)
    return acc


@pytest.mark.parametrize("name", sorted(BUILTINS))
def test_a_builtin_lift_pickles_when_its_extractor_does(name: str) -> None:
    agg = BUILTINS[name]
    lift = pickle.loads(pickle.dumps(Lift(agg.init, agg.add)))
    assert same(lift(_item(name, 2.5)), agg.add(agg.init(), _item(name, 2.5)))


def test_a_builtin_lift_with_a_lambda_extractor_does_not_pickle_and_says_what_it_is() -> None:
    agg = Sum[dict[str, float]](lambda row: row["amount"])
    lift = Lift(agg.init, agg.add)
    with pytest.raises(Exception, match="lambda"):
        pickle.dumps(lift)
    where = "test_a_builtin_lift_with_a_lambda_extractor_does_not_pickle_and_says_what_it_is.<locals>"
    assert repr(lift) == f"Lift(init=Sum.init of {where}.<lambda>, add=Sum.add of {where}.<lambda>)"
    assert repr(Lift(zero, plus)) == "Lift(init=zero, add=plus)"


def test_the_lifted_aggregator_raises_what_the_lift_raised_and_needs_merge() -> None:
    lifted = LiftedAggregator(Sum[float]())
    error = ValueError("bad record")
    with pytest.raises(ValueError, match="bad record") as raised:
        lifted.add(lifted.init(), Lifted(None, LiftFailure(error)))
    assert raised.value is error
    assert lifted.add(3, Lifted(None, 4)) == 7 and lifted.mergeable
    with pytest.raises(ConfigError, match="needs a merge function"):
        LiftedAggregator(aggregate(lambda: 0, lambda acc, v: acc + v))
