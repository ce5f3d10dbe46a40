"""``on_spark`` in the DSL: what it compiles to, and the mistakes it refuses at declaration."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from cadenza import Pipeline
from cadenza.pipelines import PipelineDefinitionError, PipelineGraph, describe


class Sale(BaseModel):
    region: str
    amount: float
    ts: float


class Total(BaseModel):
    region: str
    total: float


def totals(df: Any) -> Any:
    return df


def declare(**options: Any) -> Pipeline:
    pipeline = Pipeline("sales", tenant="finance", latency_target="2s")
    (
        pipeline.source("sales-in", value=Sale)
        .filter(lambda s: s.amount > 0)
        .on_spark(totals, topic="sales-totals", value=Total, **options)
        .map(lambda t: t)
        .sink("sales-report")
    )
    return pipeline


def test_on_spark_compiles_to_a_sink_and_a_source_and_lists_the_stage() -> None:
    """The worker sees an ordinary JSON sink and source; the graph carries the stage for Spark."""
    graph = declare(event_time="ts", watermark="5s").compile()
    (stage,) = graph.spark_stages
    sink, source = graph.node(stage.input_node), graph.node(stage.output_node)
    assert (sink.kind, sink.parameters["topic"], sink.parameters["format"]) == (
        "sink",
        stage.input_topic,
        "json",
    )
    assert (source.kind, source.parameters["topic"]) == ("source", "sales-totals")
    assert stage.input_topic == f"sales.{stage.id}.spark-in"
    assert stage.input_topic in graph.sink_topics and "sales-totals" in graph.source_topics
    assert (stage.tenant, stage.latency_target_s, stage.watermark_s) == ("finance", 2.0, 5.0)
    assert (stage.event_time_field, stage.output_mode, stage.transform) == ("ts", "append", "totals")
    assert stage.input_model is not None and stage.input_model.endswith(".Sale")
    assert stage.hops == 2  # source and filter precede it
    functions = graph.spark_functions[stage.id]
    assert functions.transform is totals and functions.input_model is Sale and functions.value_model is Total
    assert graph.functions[stage.output_node].value_model is Total


def test_the_graph_round_trips_through_json_without_the_code() -> None:
    graph = declare().compile()
    again = PipelineGraph.model_validate_json(graph.model_dump_json())
    assert again.spark_stages == graph.spark_stages
    assert again.spark_functions == {}


def test_describe_shows_the_stage() -> None:
    graph = declare(watermark="5s").compile()
    text = describe(graph)
    stage = graph.spark_stages[0]
    assert "spark stages:" in text
    assert f"{stage.id}  totals: {stage.input_topic} -> sales-totals (mode append, watermark 5s)" in text
    assert f"on_spark totals via topic={stage.input_topic}" in text


def test_untyped_input_needs_an_explicit_model() -> None:
    pipeline = Pipeline("p", tenant="t", latency_target="1s")
    stream = pipeline.source("in", value=Sale).map(lambda s: s.amount)
    with pytest.raises(PipelineDefinitionError, match="needs the model of the records it receives"):
        stream.on_spark(totals, topic="out")
    assert stream.on_spark(totals, topic="out", input=Total) is not None


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"event_time": "when"}, "event_time field 'when' is not a field of Sale"),
        ({"output_mode": "complete"}, "output_mode must be append or update"),
        ({"watermark": "soon"}, "watermark"),
    ],
)
def test_bad_options_fail_at_declaration(options: dict[str, Any], message: str) -> None:
    with pytest.raises(PipelineDefinitionError, match=message):
        declare(**options)


def test_the_result_topic_cannot_be_a_sink_of_the_same_pipeline() -> None:
    pipeline = Pipeline("p", tenant="t", latency_target="1s")
    pipeline.source("in", value=Sale).on_spark(totals, topic="loop").sink("loop")
    with pytest.raises(PipelineDefinitionError, match="also a source topic"):
        pipeline.compile()
