"""DS2's decision: hand examples, a brute force of the model, and DS2's one-step convergence."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cadenza.scaling import InstanceRates, decide, raw_parallelism


def _brute_force(
    operators: Mapping[str, int],
    edges: Sequence[tuple[str, str]],
    rates: Mapping[str, Sequence[InstanceRates]],
    source_rates: Mapping[str, float] | None,
    over_provisioning: float,
) -> dict[str, int]:
    """The model as written in the issue, by memoised recursion from each operator upward."""
    outputs: dict[str, float] = {}
    raws: dict[str, float] = {}

    def target_output(name: str) -> float:
        if name in outputs:
            return outputs[name]
        ups = [u for u, d in edges if d == name]
        if not ups:
            if source_rates and name in source_rates:
                out = source_rates[name]
            else:
                out = sum(r.true_output for r in rates[name])
            raws[name] = operators[name]
        else:
            target_input = sum(target_output(u) for u in ups)
            tp = sum(r.true_processing for r in rates[name])
            raw = 0.0 if tp == 0 else target_input / (tp / operators[name])
            raws[name] = raw
            out = sum(r.true_output for r in rates[name]) * raw / operators[name]
        outputs[name] = out
        return out

    result = {}
    for name in operators:
        target_output(name)
        has_up = any(d == name for _, d in edges)
        result[name] = math.ceil(raws[name] * (1 + over_provisioning)) if has_up else operators[name]
    return result


def test_wordcount_like_dag() -> None:
    # source emits 4000 sentences/s at the target; one flatmap instance splits 1000 sentences/s of
    # useful time into 5000 words/s; each counter absorbs 2500 words/s of useful time.
    operators = {"source": 2, "flatmap": 1, "count": 2}
    edges = [("source", "flatmap"), ("flatmap", "count")]
    rates = {
        "source": [InstanceRates(0.0, 1000.0), InstanceRates(0.0, 1000.0)],
        "flatmap": [InstanceRates(1000.0, 5000.0, 400.0, 2000.0)],
        "count": [InstanceRates(2500.0, 0.0), InstanceRates(2500.0, 0.0)],
    }
    assert decide(operators, edges, rates, {"source": 4000.0}) == {
        "source": 2,
        "flatmap": 4,
        "count": 8,
    }
    # Without source_rates the target is what the sources emit today: 2000/s -> half the above.
    assert decide(operators, edges, rates) == {"source": 2, "flatmap": 2, "count": 4}


def test_join_sums_upstreams_and_over_provisioning_rounds_up() -> None:
    operators = {"a": 1, "b": 1, "join": 3}
    edges = [("a", "join"), ("b", "join")]
    rates = {
        "a": [InstanceRates(0.0, 300.0)],
        "b": [InstanceRates(0.0, 100.0)],
        "join": [InstanceRates(100.0, 10.0), InstanceRates(100.0, 10.0), InstanceRates(100.0, 10.0)],
    }
    assert decide(operators, edges, rates) == {"a": 1, "b": 1, "join": 4}
    assert decide(operators, edges, rates, over_provisioning=0.1)["join"] == 5


def test_zero_input_with_zero_rate_gives_zero() -> None:
    operators = {"s": 1, "idle": 1}
    rates = {"s": [InstanceRates(0.0, 0.0)], "idle": [InstanceRates(0.0, 0.0)]}
    assert decide(operators, [("s", "idle")], rates) == {"s": 1, "idle": 0}


def _ok_rates(**extra: list[InstanceRates]) -> dict[str, list[InstanceRates]]:
    base = {"s": [InstanceRates(0.0, 10.0)], "m": [InstanceRates(5.0, 5.0)]}
    base.update(extra)
    return base


@pytest.mark.parametrize(
    ("operators", "edges", "rates", "source_rates", "match"),
    [
        ({"s": 1, "m": 1}, [("s", "m"), ("m", "s")], _ok_rates(), None, "cycle"),
        (
            {"s": 1, "m": 1, "x": 1},
            [("m", "x"), ("x", "m")],
            _ok_rates(x=[InstanceRates(1, 1)]),
            None,
            "cycle",
        ),
        ({"s": 1, "m": 1}, [("s", "m")], {"s": [InstanceRates(0.0, 10.0)]}, None, "'m' has no rates"),
        ({"s": 1, "m": 2}, [("s", "m")], _ok_rates(), None, "'m' has 2 instances but 1"),
        ({"s": 1, "m": 0}, [("s", "m")], _ok_rates(m=[]), None, "'m' must have a positive"),
        ({"s": 1, "m": 1}, [("s", "z")], _ok_rates(), None, "unknown operator 'z'"),
        (
            {"s": 1, "m": 1},
            [("s", "m")],
            _ok_rates(m=[InstanceRates(-1.0, 1.0)]),
            None,
            "'m'.*true_processing",
        ),
        ({"s": 1, "m": 1}, [("s", "m")], _ok_rates(m=[InstanceRates(0.0, 1.0)]), None, "'m' has a zero true"),
        ({"s": 1, "m": 1}, [("s", "m")], _ok_rates(), {"m": 1.0}, "not a source"),
        ({"s": 1, "m": 1}, [("s", "m")], _ok_rates(), {"s": -1.0}, "source rate of 's'"),
    ],
)
def test_bad_input_is_named(
    operators: dict[str, int],
    edges: list[tuple[str, str]],
    rates: dict[str, list[InstanceRates]],
    source_rates: dict[str, float] | None,
    match: str,
) -> None:
    with pytest.raises(ValueError, match=match):
        decide(operators, edges, rates, source_rates)


def test_negative_over_provisioning_is_refused() -> None:
    with pytest.raises(ValueError, match="over_provisioning"):
        decide({"s": 1}, [], {"s": [InstanceRates(0.0, 1.0)]}, over_provisioning=-0.5)


_rate = st.floats(min_value=0.0, max_value=1e6, allow_nan=False)


@st.composite
def _dags(
    draw: st.DrawFn,
) -> tuple[
    dict[str, int], list[tuple[str, str]], dict[str, list[InstanceRates]], dict[str, float] | None, float
]:
    n = draw(st.integers(1, 7))
    names = [f"op{i}" for i in range(n)]
    edges = [(names[i], names[j]) for i in range(n) for j in range(i + 1, n) if draw(st.booleans())]
    order = draw(st.permutations(names))
    operators = {name: draw(st.integers(1, 4)) for name in order}
    rates = {
        name: [
            InstanceRates(draw(st.floats(0.5, 1e6)), draw(_rate), draw(_rate), draw(_rate))
            for _ in range(operators[name])
        ]
        for name in order
    }
    sources = [name for name in names if not any(d == name for _, d in edges)]
    source_rates = {s: draw(_rate) for s in sources if draw(st.booleans())} if draw(st.booleans()) else None
    over = draw(st.sampled_from([0.0, 0.1, 0.25, 1.0]))
    return operators, draw(st.permutations(edges)), rates, source_rates, over


@settings(max_examples=300, deadline=None)
@given(_dags())
def test_matches_brute_force(
    case: tuple[
        dict[str, int], list[tuple[str, str]], dict[str, list[InstanceRates]], dict[str, float] | None, float
    ],
) -> None:
    operators, edges, rates, source_rates, over = case
    assert decide(operators, edges, rates, source_rates, over) == _brute_force(
        operators, edges, rates, source_rates, over
    )


@st.composite
def _linear_pipelines(
    draw: st.DrawFn,
) -> tuple[dict[str, int], list[tuple[str, str]], dict[str, tuple[float, float]], dict[str, float], float]:
    """A DAG whose instances have fixed per-instance capacity and selectivity (rates scale linearly).

    Capacities and outputs are powers of two and source rates whole numbers, so every quotient in the
    model is exact and the property tests the model rather than float rounding.
    """
    n = draw(st.integers(2, 6))
    names = [f"op{i}" for i in range(n)]
    edges = [(names[i], names[j]) for i in range(n) for j in range(i + 1, n) if draw(st.booleans())]
    # every non-first operator gets at least one upstream so it is not a source with zero input
    for j in range(1, n):
        if not any(d == names[j] for _, d in edges):
            edges.append((names[draw(st.integers(0, j - 1))], names[j]))
    per_instance = {
        name: (2.0 ** draw(st.integers(0, 10)), 2.0 ** draw(st.integers(-3, 3))) for name in names
    }
    operators = {name: draw(st.integers(1, 6)) for name in names}
    source_rates = {names[0]: float(draw(st.integers(1, 10_000)))}
    over = draw(st.sampled_from([0.0, 0.25, 0.5]))
    return operators, edges, per_instance, source_rates, over


@settings(max_examples=300, deadline=None)
@given(_linear_pipelines())
def test_one_step_convergence_when_rates_scale_linearly(
    case: tuple[
        dict[str, int], list[tuple[str, str]], dict[str, tuple[float, float]], dict[str, float], float
    ],
) -> None:
    operators, edges, per_instance, source_rates, over = case

    def measured(parallelism: Mapping[str, int]) -> dict[str, list[InstanceRates]]:
        return {
            name: [InstanceRates(per_instance[name][0], per_instance[name][0] * per_instance[name][1])]
            * count
            for name, count in parallelism.items()
        }

    first = decide(operators, edges, measured(operators), source_rates, over)
    second = decide(first, edges, measured(first), source_rates, over)
    assert second == first


@settings(max_examples=200, deadline=None)
@given(_dags())
def test_raw_parallelism_is_what_decide_rounds(
    case: tuple[
        dict[str, int], list[tuple[str, str]], dict[str, list[InstanceRates]], dict[str, float] | None, float
    ],
) -> None:
    operators, edges, rates, source_rates, over = case
    raw = raw_parallelism(operators, edges, rates, source_rates)
    has_upstream = {d for _, d in edges}
    rounded = {
        name: math.ceil(r * (1 + over)) if name in has_upstream else operators[name]
        for name, r in raw.items()
    }
    assert rounded == decide(operators, edges, rates, source_rates, over)
