"""Aggregators: results, merge laws, and accumulators that survive a JSON changelog."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cadenza.errors import ConfigError
from cadenza.operators import Aggregate, Aggregator, Count, Max, Mean, Min, Sum, aggregate

VALUES = st.lists(st.integers(-1000, 1000), max_size=20)

AGGREGATORS: dict[str, tuple[Aggregator[Any, Any, Any], Any]] = {
    "count": (Count(), len),
    "sum": (Sum(), sum),
    "min": (Min(), lambda xs: min(xs) if xs else None),
    "max": (Max(), lambda xs: max(xs) if xs else None),
    "mean": (Mean(), lambda xs: sum(xs) / len(xs) if xs else None),
    "values": (
        aggregate(list, lambda acc, v: sorted([*acc, v]), lambda a, b: sorted(a + b), tuple),
        lambda xs: tuple(sorted(xs)),
    ),
}


def fold(agg: Aggregator[Any, Any, Any], values: list[Any], through_json: bool = False) -> Any:
    acc = agg.init()
    for value in values:
        acc = agg.add(acc, value)
        if through_json:
            acc = json.loads(json.dumps(acc))
    return acc


@pytest.mark.parametrize("name", sorted(AGGREGATORS))
@given(values=VALUES)
def test_result_equals_plain_computation(name: str, values: list[int]) -> None:
    agg, plain = AGGREGATORS[name]
    assert agg.result(fold(agg, values)) == plain(values)


@pytest.mark.parametrize("name", sorted(AGGREGATORS))
@given(left=VALUES, right=VALUES)
def test_merge_of_parts_equals_fold_of_whole(name: str, left: list[int], right: list[int]) -> None:
    agg, plain = AGGREGATORS[name]
    merged = agg.merge(fold(agg, left), fold(agg, right))
    assert agg.result(merged) == plain(left + right)


@pytest.mark.parametrize("name", sorted(AGGREGATORS))
@given(values=VALUES)
def test_accumulators_survive_a_json_changelog(name: str, values: list[int]) -> None:
    agg, plain = AGGREGATORS[name]
    assert agg.result(fold(agg, values, through_json=True)) == plain(values)


def test_extractors() -> None:
    rows = [{"amount": 3.0}, {"amount": 5.0}]
    assert Sum[dict[str, float]](of=lambda r: r["amount"]).result(fold_rows(Sum(of=amount), rows)) == 8.0
    assert Mean(of=amount).result(fold_rows(Mean(of=amount), rows)) == 4.0
    assert Min(of=amount).result(fold_rows(Min(of=amount), rows)) == 3.0
    assert Max(of=amount).result(fold_rows(Max(of=amount), rows)) == 5.0


def amount(row: dict[str, float]) -> float:
    return row["amount"]


def fold_rows(agg: Aggregator[dict[str, float], Any, Any], rows: list[dict[str, float]]) -> Any:
    acc = agg.init()
    for row in rows:
        acc = agg.add(acc, row)
    return acc


def test_mean_accepts_a_tuple_accumulator() -> None:
    assert Mean[float]().result(Mean[float]().add((4, 1), 6)) == 5


def test_user_aggregate_without_result_returns_the_accumulator() -> None:
    agg: Aggregate[int, int, int] = aggregate(lambda: 0, lambda acc, v: acc + v, lambda a, b: a + b)
    assert agg.result(agg.add(agg.init(), 4)) == 4


def test_user_aggregate_needs_an_init_function() -> None:
    with pytest.raises(ConfigError, match="zero-argument"):
        aggregate(0, lambda acc, v: acc + v, lambda a, b: a + b)  # type: ignore[arg-type]


def test_declared_aggregations_are_the_operators_aggregators_and_an_empty_mean_is_none() -> None:
    """``WindowedStream.mean()`` and ``Mean`` are one definition: folding the same values through the
    functions a declaration compiles to gives what the aggregator gives, and no values give None."""
    from cadenza.pipelines import Pipeline, Tumbling  # noqa: PLC0415

    values = [3.0, -1.5, 10.0]
    builtins: dict[str, tuple[Aggregator[Any, Any, Any], Any]] = {
        "count": (Count(), None),
        "sum": (Sum(), lambda v: v),
        "min": (Min(), lambda v: v),
        "max": (Max(), lambda v: v),
        "mean": (Mean(), lambda v: v),
    }
    for kind, (aggregator, fn) in builtins.items():
        pipeline = Pipeline(f"agg-{kind}", tenant="t", latency_target="1s")
        windowed = pipeline.source("in").key_by(lambda v: "k").window(Tumbling("1s"))
        declared = getattr(windowed, kind)() if fn is None else getattr(windowed, kind)(fn)
        declared.sink("out")
        functions = pipeline.compile().functions[declared.step]
        assert functions.init is not None and functions.add is not None and functions.result is not None
        assert isinstance(getattr(functions.result, "__self__", None), type(aggregator))
        acc = functions.init()
        for value in values:
            acc = functions.add(acc, value)
        assert functions.result(acc) == aggregator.result(fold(aggregator, values)), kind
    mean = Pipeline("empty-mean", tenant="t", latency_target="1s")
    step = mean.source("in").key_by(lambda v: "k").window(Tumbling("1s")).mean(lambda v: v)
    step.sink("out")
    result = mean.compile().functions[step.step].result
    assert result is not None
    assert result(mean.compile().functions[step.step].init()) is None  # type: ignore[misc]


@pytest.mark.parametrize(("agg", "expected"), [(Min[Any](), 2), (Max[Any](), 7)])
def test_min_and_max_leave_out_none_items_wherever_they_come(
    agg: Aggregator[Any, Any, Any], expected: int
) -> None:
    """A ``None`` item is "no value" to ``add`` as to ``merge``: the result does not depend on its place
    (it used to pass first and raise later), and folding it in equals merging its accumulator."""
    for values in ([None, 7, 2], [7, None, 2], [7, 2, None]):
        assert agg.result(fold(agg, values)) == expected
    assert agg.add(5, None) == agg.merge(5, agg.add(agg.init(), None)) == 5
    assert agg.result(fold(agg, [None, None])) is None
