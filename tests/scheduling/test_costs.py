"""CostModel: EWMA estimates, path costs over branching DAGs, incremental refresh, feedback."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cadenza.errors import ConfigError
from cadenza.scheduling import DEFAULT_OPERATOR_COST, CostModel

# src fans out to a cheap and an expensive branch that join again at the sink:
#        +--> fast (2) --+
#  src (1)               +--> sink (3)
#        +--> slow (5) --+
_DAG = {"src": ["fast", "slow"], "fast": ["sink"], "slow": ["sink"], "sink": []}


def _model(**kwargs: float) -> CostModel:
    model = CostModel(**kwargs)
    model.add_pipeline("p", _DAG)
    for op, cost in {"src": 1.0, "fast": 2.0, "slow": 5.0, "sink": 3.0}.items():
        model.set_estimate("p", op, cost)
    return model


def test_unknown_operators_cost_the_default() -> None:
    model = CostModel()
    assert DEFAULT_OPERATOR_COST == 1e-3
    assert model.estimate("nope", "op") == 1e-3
    assert model.path_cost("nope", "op") == 1e-3
    assert model.source_path_cost("nope") == 1e-3
    model.add_pipeline("p", {"a": ["b"]})
    assert model.path_cost("p", "a") == 2e-3  # both default, in a chain
    assert model.path_cost("p", "unregistered") == 1e-3


def test_path_cost_takes_the_most_expensive_branch() -> None:
    model = _model()
    assert model.path_cost("p", "sink") == 3.0
    assert model.path_cost("p", "fast") == 5.0
    assert model.path_cost("p", "slow") == 8.0
    assert model.path_cost("p", "src") == 9.0
    assert model.source_path_cost("p") == 9.0
    assert model.operators("p") == ["src", "fast", "slow", "sink"]
    assert model.sources("p") == ["src"]
    assert model.downstream("p", "src") == ["fast", "slow"]


def test_ewma_update_and_path_refresh() -> None:
    model = CostModel(default_cost=0.25, alpha=0.5, recompute_tolerance=0.0)
    model.add_pipeline("p", _DAG)
    assert model.path_cost("p", "src") == 0.75  # src -> fast|slow -> sink, all 0.25
    model.observe("p", "slow", 1.25)
    assert model.estimate("p", "slow") == 0.75  # 0.25 + 0.5 * (1.25 - 0.25)
    assert model.path_cost("p", "slow") == 1.0
    assert model.path_cost("p", "src") == 1.25
    assert model.path_cost("p", "fast") == 0.5  # the other branch is untouched
    model.observe("p", "slow", 0.75)
    assert model.estimate("p", "slow") == 0.75
    model.observe("p", "sink", 2.25)  # 0.25 -> 1.25; every ancestor moves
    assert [model.path_cost("p", op) for op in ["sink", "fast", "slow", "src"]] == [1.25, 1.5, 2.0, 2.25]


def test_a_cheaper_branch_stops_dominating() -> None:
    model = _model(alpha=1.0, recompute_tolerance=0.0)
    model.observe("p", "slow", 0.5)  # alpha 1: the estimate is the last observation
    assert model.path_cost("p", "slow") == 3.5
    assert model.path_cost("p", "src") == 1.0 + 5.0  # now via fast
    model.observe("p", "fast", 0.25)
    assert model.path_cost("p", "src") == 1.0 + 3.5


def test_small_drift_does_not_recompute_paths_but_a_large_one_does() -> None:
    model = _model(alpha=1.0, recompute_tolerance=0.5)
    model.observe("p", "slow", 7.0)  # 5 -> 7: drift 2 <= 0.5 * 5
    assert model.estimate("p", "slow") == 7.0
    assert model.path_cost("p", "src") == 9.0
    model.observe("p", "slow", 8.0)  # 5 -> 8: drift 3 > 2.5
    assert model.path_cost("p", "src") == 12.0
    model.observe("p", "slow", 11.0)  # measured against 8, the value in use: 3 <= 4
    assert model.path_cost("p", "src") == 12.0


def test_invalid_observations_are_ignored() -> None:
    model = _model()
    for bad in [-1.0, float("nan"), float("inf")]:
        model.observe("p", "slow", bad)
    assert model.estimate("p", "slow") == 5.0
    assert model.path_cost("p", "src") == 9.0


def test_observing_an_unknown_operator_registers_it() -> None:
    model = CostModel(default_cost=0.25, alpha=0.5)
    model.observe("q", "solo", 0.75)
    assert model.estimate("q", "solo") == 0.5
    assert model.path_cost("q", "solo") == 0.5
    assert model.sources("q") == ["solo"]


def test_feedback_blends_like_count_observations() -> None:
    model = _model(alpha=0.5, recompute_tolerance=0.0)
    assert model.apply_feedback("p", "sink", 7.0, count=2)  # weight 1 - 0.5**2 = 0.75
    assert model.estimate("p", "sink") == 3.0 + 0.75 * 4.0
    assert model.path_cost("p", "src") == 1.0 + 5.0 + 6.0
    assert model.apply_feedback("p", "sink", 1.0, count=10_000)  # a large sample replaces the estimate
    assert model.estimate("p", "sink") == 1.0
    assert model.path_cost("p", "src") == 7.0


@pytest.mark.parametrize(
    ("value", "count"), [(-1.0, 5), (float("nan"), 5), (float("inf"), 5), (1.0, 0), (1.0, -3)]
)
def test_invalid_feedback_is_refused(value: float, count: int) -> None:
    model = _model()
    assert not model.apply_feedback("p", "sink", value, count)
    assert model.estimate("p", "sink") == 3.0


def test_feedback_for_an_operator_of_another_process_registers_it() -> None:
    model = CostModel(default_cost=0.25, alpha=0.5)
    assert model.apply_feedback("remote", "agg", 1.25, count=1)
    assert model.estimate("remote", "agg") == 0.75


def test_cycles_are_refused_and_leave_the_model_unchanged() -> None:
    model = _model()
    with pytest.raises(ConfigError, match=r"'p': operators \['fast', 'sink', 'slow', 'src'\] form a cycle"):
        model.add_edge("p", "sink", "src")
    with pytest.raises(ConfigError, match="cycle"):
        model.add_edge("p", "src", "src")
    assert model.downstream("p", "sink") == []
    assert model.path_cost("p", "src") == 9.0


def test_growing_a_pipeline_keeps_estimates() -> None:
    model = _model()
    model.add_edge("p", "sink", "archive")
    assert model.estimate("p", "slow") == 5.0
    assert model.path_cost("p", "src") == 9.0 + DEFAULT_OPERATOR_COST


def test_a_hop_counts_for_the_paths_through_it_and_not_for_the_operator_after_it() -> None:
    model = _model()
    assert model.hop("p", "slow") == 0.0  # not measured: no hop
    model.set_hop("p", "slow", 0.5)
    assert model.hop("p", "slow") == 0.5
    assert model.path_cost("p", "slow") == 5.0 + 3.0  # the hop is behind it
    assert model.path_cost("p", "src") == 1.0 + 0.5 + 5.0 + 3.0
    model.set_hop("p", "sink", 4.0)  # into the join of both branches
    assert model.path_cost("p", "fast") == 2.0 + 4.0 + 3.0
    assert model.path_cost("p", "src") == 1.0 + 0.5 + 5.0 + 4.0 + 3.0
    assert model.source_path_cost("p") == model.path_cost("p", "src")
    model.set_hop("p", "fast", 4.0)  # now the fast branch is the longer path
    assert model.path_cost("p", "src") == 1.0 + 4.0 + 2.0 + 4.0 + 3.0
    model.set_hop("p", "fast", 0.0)
    model.set_hop("p", "slow", 0.0)
    assert model.path_cost("p", "src") == 1.0 + 5.0 + 4.0 + 3.0


def test_a_hop_survives_a_growing_pipeline_and_a_refused_cycle() -> None:
    model = _model()
    model.set_hop("p", "sink", 2.0)
    model.add_edge("p", "sink", "archive")
    with pytest.raises(ConfigError, match="cycle"):
        model.add_edge("p", "archive", "src")
    assert model.hop("p", "sink") == 2.0
    assert model.path_cost("p", "src") == 1.0 + 5.0 + 2.0 + 3.0 + DEFAULT_OPERATOR_COST


@pytest.mark.parametrize("seconds", [-0.1, float("nan"), float("inf")])
def test_an_impossible_hop_is_refused(seconds: float) -> None:
    model = _model()
    with pytest.raises(ValueError, match="hop must be finite and non-negative"):
        model.set_hop("p", "sink", seconds)
    assert model.hop("p", "sink") == 0.0
    assert model.path_cost("p", "src") == 9.0


@pytest.mark.parametrize(
    "kwargs", [{"default_cost": -1.0}, {"alpha": 0.0}, {"alpha": 1.5}, {"recompute_tolerance": -0.1}]
)
def test_bad_settings_are_config_errors(kwargs: dict[str, float]) -> None:
    with pytest.raises(ConfigError):
        CostModel(**kwargs)


def _brute_force_path(model: CostModel, pipeline: str, op: str) -> float:
    children = model.downstream(pipeline, op)
    own = model.estimate(pipeline, op)
    if not children:
        return own
    return own + max(model.hop(pipeline, c) + _brute_force_path(model, pipeline, c) for c in children)


@st.composite
def dags(draw: st.DrawFn) -> dict[str, list[str]]:
    """Random DAGs: edges only go from a lower to a higher numbered operator."""
    n = draw(st.integers(1, 8))
    names = [f"op{i}" for i in range(n)]
    return {names[i]: [names[j] for j in range(i + 1, n) if draw(st.booleans())] for i in range(n)}


@settings(max_examples=300, deadline=None)
@given(
    dags(),
    st.lists(
        st.tuples(
            st.integers(0, 7),
            st.floats(0, 10, allow_nan=False),
            st.sampled_from(["observe", "feedback", "hop"]),
        ),
        max_size=30,
    ),
)
def test_incremental_path_costs_match_a_full_recomputation(
    dag: dict[str, list[str]], updates: list[tuple[int, float, str]]
) -> None:
    model = CostModel(alpha=0.5, recompute_tolerance=0.0)
    model.add_pipeline("p", dag)
    ops = list(dag)
    for index, value, how in updates:
        op = ops[index % len(ops)]
        if how == "feedback":
            model.apply_feedback("p", op, value, 3)
        elif how == "hop":
            model.set_hop("p", op, value)
        else:
            model.observe("p", op, value)
        for each in ops:
            assert model.path_cost("p", each) == _brute_force_path(model, "p", each)
