"""The parallel keywords of map, filter and flat_map: what a step records, and what is refused."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from cadenza import Pipeline
from cadenza.pipelines import PipelineDefinitionError, describe
from cadenza.pipelines.parallel import ParallelSpec


@pytest.mark.parametrize("kind", ["map", "filter", "flat_map"])
def test_the_spec_round_trips_through_the_compiled_graph(kind: str) -> None:
    pipeline = Pipeline("p", tenant="t", latency_target="1s")
    stream = getattr(pipeline.source("in"), kind)(json.dumps, parallel="auto", timeout=timedelta(seconds=2))
    stream.sink("out")
    node = pipeline.compile().node(stream.step)
    assert node.parameters["parallel"] == "auto"
    assert ParallelSpec.of(node.parameters) == ParallelSpec(None, "process", 2.0)


def test_a_plain_step_records_nothing_new() -> None:
    pipeline = Pipeline("p", tenant="t", latency_target="1s")
    stream = pipeline.source("in").map(json.dumps)
    stream.sink("out")
    node = pipeline.compile().node(stream.step)
    assert set(node.parameters) == {"function"}
    assert ParallelSpec.of(node.parameters).inline


def test_a_timeout_takes_the_step_off_the_lessor_even_at_parallel_1() -> None:
    spec = ParallelSpec(1, "thread", 0.5)
    assert not spec.inline
    assert ParallelSpec.of(spec.parameters()) == spec


def test_a_lambda_is_refused_under_process_naming_pipeline_and_step() -> None:
    pipeline = Pipeline("orders", tenant="t", latency_target="1s")
    source = pipeline.source("in")
    with pytest.raises(PipelineDefinitionError, match=r"pipeline 'orders', step '2-map'.*cannot be pickled"):
        source.map(lambda v: v, parallel=2)


def test_a_lambda_is_fine_on_threads_and_on_the_lessor() -> None:
    pipeline = Pipeline("p", tenant="t", latency_target="1s")
    source = pipeline.source("in")
    source.map(lambda v: v, parallel=4, executor="thread").sink("a")
    source.filter(lambda v: True).sink("b")
    pipeline.compile()


@pytest.mark.parametrize(
    ("keywords", "message"),
    [
        ({"parallel": 0}, "positive integer or 'auto'"),
        ({"parallel": True}, "positive integer or 'auto'"),
        ({"parallel": "many"}, "positive integer or 'auto'"),
        ({"executor": "fiber"}, "executor must be 'process'"),
        ({"timeout": "0s"}, "positive, finite"),
        ({"timeout": "soon"}, "timeout"),
    ],
)
def test_what_cannot_work_is_refused(keywords: dict[str, object], message: str) -> None:
    pipeline = Pipeline("p", tenant="t", latency_target="1s")
    with pytest.raises(PipelineDefinitionError, match=message):
        pipeline.source("in").map(json.dumps, **keywords)  # type: ignore[arg-type]


def test_describe_shows_how_a_step_runs() -> None:
    pipeline = Pipeline("p", tenant="t", latency_target="1s")
    pipeline.source("in").map(json.dumps, parallel=3, executor="thread", timeout="500ms").filter(bool).sink(
        "out"
    )
    text = describe([pipeline.compile()])
    assert "map dumps, parallel=3 (thread, timeout 0.5s)" in text
    assert "filter bool " in text  # a plain step says nothing more
