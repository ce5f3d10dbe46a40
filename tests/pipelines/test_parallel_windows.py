"""``parallel=`` on window aggregations: what a step records, what is refused at the user's line, and
what the worker gets to build the lessees' function from."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from cadenza import Pipeline
from cadenza.operators import Lift
from cadenza.pipelines import Hopping, PipelineDefinitionError, PipelineGraph, Session, Sliding, Tumbling
from cadenza.pipelines.parallel import ParallelSpec
from cadenza.pipelines.stream import WindowedStream

BUILTINS = ["count", "sum", "min", "max", "mean"]


def amount(value: dict[str, float]) -> float:
    return value["amount"]


def user(value: dict[str, Any]) -> str:
    return str(value["user"])


def zero() -> float:
    return 0.0


def plus(acc: float, value: dict[str, float]) -> float:
    return acc + value["amount"]


def both(a: float, b: float) -> float:
    return a + b


def windowed(name: str = "p", spec: Any = None) -> WindowedStream[Any]:
    pipeline = Pipeline(name, tenant="t", latency_target="1s")
    return pipeline.source("in").key_by(user).window(spec if spec is not None else Tumbling("10s"))


def declare(stream: WindowedStream[Any], kind: str, fn: Any = amount, **keywords: Any) -> Any:
    if kind == "count":
        return stream.count(**keywords)
    if kind == "aggregate":
        return stream.aggregate(zero, plus, both, **keywords)
    return getattr(stream, kind)(fn, **keywords)


@pytest.mark.parametrize("kind", [*BUILTINS, "aggregate"])
@pytest.mark.parametrize(
    ("keywords", "spec"),
    [
        ({"parallel": 4}, ParallelSpec(4, "process", None)),
        ({"parallel": "auto"}, ParallelSpec(None, "process", None)),
        ({"parallel": 2, "executor": "thread"}, ParallelSpec(2, "thread", None)),
    ],
)
def test_the_spec_round_trips_through_the_compiled_graph(
    kind: str, keywords: dict[str, Any], spec: ParallelSpec
) -> None:
    stream = declare(windowed(), kind, **keywords)
    stream.sink("out")
    graph = stream.pipeline.compile()
    node = graph.node(stream.step)
    assert node.parameters["parallel"] == keywords["parallel"]
    assert ParallelSpec.of(node.parameters) == spec
    restored = PipelineGraph.model_validate_json(graph.model_dump_json())
    assert ParallelSpec.of(restored.node(stream.step).parameters) == spec


@pytest.mark.parametrize("kind", [*BUILTINS, "aggregate"])
def test_a_plain_aggregation_records_nothing_new(kind: str) -> None:
    stream = declare(windowed(), kind)
    stream.sink("out")
    node = stream.pipeline.compile().node(stream.step)
    assert set(node.parameters) == {"aggregation", "window", "allowed_lateness_s", "function"}
    assert ParallelSpec.of(node.parameters).inline
    explicit = declare(windowed(), kind, parallel=1)
    explicit.sink("out")
    assert explicit.pipeline.compile().node(explicit.step).parameters == node.parameters


@pytest.mark.parametrize("kind", [*BUILTINS, "aggregate"])
def test_the_worker_builds_the_lessees_function_from_the_node_functions(kind: str) -> None:
    """``Lift(functions.init, functions.add)``: it pickles (what a process lessee receives) and computes
    a record's own accumulator."""
    stream = declare(windowed(), kind, parallel=2)
    stream.sink("out")
    functions = stream.pipeline.compile().functions[stream.step]
    assert functions.init is not None and functions.add is not None and functions.merge is not None
    lift = pickle.loads(pickle.dumps(Lift(functions.init, functions.add)))
    record = {"user": "u", "amount": 2.5}
    assert lift(record) == functions.add(functions.init(), record)


@pytest.mark.parametrize("spec", [Tumbling("10s"), Hopping("10s", "5s"), Sliding("10s"), Session("10s")])
def test_every_window_kind_takes_parallel(spec: Any) -> None:
    stream = windowed(spec=spec).sum(amount, parallel=2)
    stream.sink("out")
    assert not ParallelSpec.of(stream.pipeline.compile().node(stream.step).parameters).inline


def test_aggregate_without_merge_is_refused_naming_pipeline_and_step() -> None:
    stream = windowed("orders")
    with pytest.raises(
        PipelineDefinitionError,
        match=r"pipeline 'orders', step '3-aggregate'.*aggregate\(\) with parallel=2 needs merge=",
    ):
        stream.aggregate(zero, plus, parallel=2)
    with pytest.raises(PipelineDefinitionError, match=r"parallel='auto' needs merge="):
        windowed().aggregate(zero, plus, parallel="auto", executor="thread")


def test_aggregate_without_merge_is_fine_on_the_lessor() -> None:
    stream = windowed().aggregate(zero, plus, parallel=1)
    stream.sink("out")
    stream.pipeline.compile()


def test_a_missing_merge_is_reported_before_what_would_not_pickle() -> None:
    with pytest.raises(PipelineDefinitionError, match="needs merge="):
        windowed().aggregate(lambda: 0.0, lambda acc, v: acc + 1, parallel=2)


@pytest.mark.parametrize("kind", ["sum", "min", "max", "mean"])
def test_a_lambda_extractor_is_refused_under_process_naming_pipeline_and_step(kind: str) -> None:
    with pytest.raises(
        PipelineDefinitionError,
        match=rf"pipeline 'orders', step '3-{kind}'.*{kind}\(\) with executor='process'.*cannot be pickled.*"
        r"<lambda>.*executor='thread'",
    ):
        declare(windowed("orders"), kind, lambda v: v["amount"], parallel=2)


@pytest.mark.parametrize(
    ("init", "add", "merge"),
    [
        (lambda: 0.0, plus, both),  # init
        (zero, lambda acc, v: acc + v["amount"], both),  # add
    ],
)
def test_an_aggregate_that_would_not_pickle_is_refused_under_process(init: Any, add: Any, merge: Any) -> None:
    with pytest.raises(PipelineDefinitionError, match=r"step '3-aggregate'.*cannot be pickled.*<lambda>"):
        windowed().aggregate(init, add, merge, parallel=2)


def test_merge_need_not_pickle_and_lambdas_are_fine_on_threads_and_on_the_lessor() -> None:
    """``merge`` runs on the worker's thread only; a thread lessee receives no pickle."""
    stream = windowed()
    stream.aggregate(zero, plus, lambda a, b: a + b, parallel=2).sink("a")
    stream.sum(lambda v: v["amount"], parallel="auto", executor="thread").sink("b")
    last = stream.mean(lambda v: v["amount"])
    last.sink("c")
    last.pipeline.compile()


@pytest.mark.parametrize(
    ("keywords", "message"),
    [
        ({"parallel": 0}, "positive integer or 'auto'"),
        ({"parallel": True}, "positive integer or 'auto'"),
        ({"parallel": "many"}, "positive integer or 'auto'"),
        ({"parallel": 2, "executor": "fiber"}, "executor must be 'process'"),
    ],
)
@pytest.mark.parametrize("kind", ["count", "aggregate"])
def test_bad_keywords_are_refused_at_the_aggregation(
    kind: str, keywords: dict[str, Any], message: str
) -> None:
    with pytest.raises(PipelineDefinitionError, match=rf"step '3-{kind}'.*{kind}\(\) .*{message}"):
        declare(windowed(), kind, **keywords)


def test_aggregations_take_no_timeout() -> None:
    """A record past its timeout would be left out of its windows: not the same results."""
    with pytest.raises(TypeError, match="timeout"):
        windowed().count(parallel=2, timeout="1s")  # type: ignore[call-arg]
