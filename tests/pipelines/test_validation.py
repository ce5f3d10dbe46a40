"""Every refusal names the pipeline and the step, and says what to do; messages are asserted in full."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from typer.testing import CliRunner

from cadenza.cli.app import app
from cadenza.errors import CadenzaError
from cadenza.pipelines import Pipeline, PipelineDefinitionError, PipelineGraph, Session, Tumbling

PARSE_HINT = "write a number and a unit, e.g. '250ms', '1.5s', '2m' (units: us, ms, s, m, min, h)"


class Click(BaseModel):
    user: str
    page: str


def make(name: str = "p") -> Pipeline:
    return Pipeline(name, tenant="t", latency_target="1s")


def raises(action: Callable[[], Any], message: str) -> PipelineDefinitionError:
    with pytest.raises(PipelineDefinitionError, match=f"^{re.escape(message)}$") as info:
        action()
    return info.value


# --- pipeline settings -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "seconds"),
    [("250ms", 0.25), ("1.5s", 1.5), ("2m", 120.0), (0.1, 0.1), (3, 3.0), (timedelta(milliseconds=20), 0.02)],
)
def test_latency_target_parsing(target: str | float | timedelta, seconds: float) -> None:
    assert Pipeline("p", "t", target).latency_target_s == seconds


def test_bad_latency_targets_name_the_pipeline() -> None:
    error = raises(
        lambda: Pipeline("clicks", "ads", "fast"),
        f"pipeline 'clicks': latency target: cannot parse 'fast'; {PARSE_HINT}",
    )
    assert (error.pipeline, error.step) == ("clicks", None)
    assert isinstance(error, CadenzaError)
    raises(
        lambda: Pipeline("clicks", "ads", "0ms"),
        "pipeline 'clicks': latency target must be greater than zero, got '0ms'",
    )
    raises(
        lambda: Pipeline("clicks", "ads", -1),
        "pipeline 'clicks': latency target: must be a finite, non-negative duration, got -1",
    )


def test_pipeline_names_must_be_topic_safe() -> None:
    raises(
        lambda: Pipeline("my pipeline", "t", "1s"),
        "pipeline name 'my pipeline' may only contain letters, digits, '.', '_' and '-' (Kafka topic rules)",
    )
    raises(lambda: Pipeline("", "t", "1s"), "pipeline name must not be empty")
    raises(lambda: Pipeline("..", "t", "1s"), "pipeline name must not be '.' or '..'")
    raises(
        lambda: Pipeline("x" * 201, "t", "1s"),
        f"pipeline name {'x' * 201!r} is 201 characters long; the limit is 200",
    )
    assert Pipeline("Team_A.clicks-v2", "t", "1s").name == "Team_A.clicks-v2"


def test_tenant_weight_and_topics_are_checked() -> None:
    raises(lambda: Pipeline("p", "", "1s"), "pipeline 'p': tenant must not be empty")
    raises(
        lambda: Pipeline("p", "t", "1s", tenant_weight=0),
        "pipeline 'p': tenant weight must be a positive number, got 0",
    )
    raises(
        lambda: Pipeline("p", "t", "1s", tenant_weight=float("inf")),
        "pipeline 'p': tenant weight must be a positive number, got inf",
    )
    raises(
        lambda: Pipeline("p", "t", "1s", dead_letter_topic="a b"),
        "pipeline 'p': dead-letter topic 'a b' may only contain letters, digits, '.', '_' and '-' "
        "(Kafka topic rules)",
    )


# --- whole-graph rules at compile() ----------------------------------------------------------


def test_no_source() -> None:
    raises(
        lambda: make("empty").compile(),
        "pipeline 'empty': no source; start with pipeline.source(topic, value=Model)",
    )


def test_no_sink() -> None:
    pipeline = make()
    pipeline.source("in").map(str)
    error = raises(
        pipeline.compile,
        "pipeline 'p', step '2-map': no sink: the stream ends here without writing anywhere; end it with "
        "sink(topic)",
    )
    assert error.step == "2-map"


def test_no_sink_lists_every_end() -> None:
    pipeline = make()
    pipeline.source("a").map(str)
    pipeline.source("b")
    raises(
        pipeline.compile,
        "pipeline 'p', step '2-map': no sink: the stream ends at steps '2-map', '3-source' without writing "
        "anywhere; end it with sink(topic)",
    )


def test_dangling_stream_end() -> None:
    pipeline = make()
    source = pipeline.source("in")
    source.sink("out")
    source.map(str, name="orphan")
    raises(
        pipeline.compile,
        "pipeline 'p', step '3-map': dangling stream: this step is not followed by a sink; every path must "
        "end in sink(topic)",
    )


def test_unused_source_is_a_dangling_stream() -> None:
    pipeline = make()
    pipeline.source("in").sink("out")
    pipeline.source("forgotten")
    raises(
        pipeline.compile,
        "pipeline 'p', step '3-source': dangling stream: this step is not followed by a sink; every path "
        "must end in sink(topic)",
    )


def test_dangling_branch_without_any_step() -> None:
    pipeline = make()
    big, _small = pipeline.source("in").branch(bool, callable)
    big.sink("out")
    raises(
        pipeline.compile,
        "pipeline 'p', step '2-branch': dangling branch: branch 2 of 2 is never consumed; every branch must "
        "end in a sink",
    )


def test_dangling_branch_ending_in_a_step() -> None:
    pipeline = make()
    big, small = pipeline.source("in").branch(bool, callable)
    big.sink("out")
    small.map(str).filter(bool)
    raises(
        pipeline.compile,
        "pipeline 'p', step '5-filter': dangling branch: branch 2 of step '2-branch' ends here without a "
        "sink; every branch must end in sink(topic)",
    )


def test_window_never_aggregated() -> None:
    pipeline = make()
    keyed = pipeline.source("in").key_by(str)
    keyed.window(Tumbling("1s"))
    keyed.sink("out")
    raises(
        pipeline.compile,
        "pipeline 'p', step '2-key_by': window(tumbling 1s) is never aggregated; follow it with count(), "
        "sum(), min(), max(), mean() or aggregate()",
    )


def test_sink_topic_equal_to_a_source_topic() -> None:
    pipeline = make("loop")
    pipeline.source("events").map(str).sink("events")
    raises(
        pipeline.compile,
        "pipeline 'loop', step '3-sink': sink topic 'events' is also a source topic of this pipeline (step "
        "'1-source'); the pipeline would consume its own output forever",
    )


def test_sink_or_source_on_an_internal_topic() -> None:
    pipeline = make()
    pipeline.source("in").sink("p.dlq")
    raises(
        pipeline.compile,
        "pipeline 'p', step '2-sink': sink topic 'p.dlq' is an internal topic of this pipeline",
    )
    pipeline = make()
    pipeline.source("p.late").sink("out")
    raises(
        pipeline.compile,
        "pipeline 'p', step '1-source': source topic 'p.late' is an internal topic of this pipeline",
    )


def test_sink_into_another_pipelines_source_is_fine() -> None:
    first, second = make("first"), make("second")
    first.source("raw").sink("clean")
    second.source("clean").sink("final")
    assert first.compile().sink_topics == second.compile().source_topics == ["clean"]


# --- rules checked where the step is declared ------------------------------------------------


def test_window_without_a_key() -> None:
    pipeline = make("clicks")
    stream = pipeline.source("in").filter(bool)
    error = raises(
        lambda: stream.window(Tumbling("1s")),
        "pipeline 'clicks', step '2-filter': window without a key: window(tumbling 1s) needs keyed records; "
        "call key_by(...) before window(...)",
    )
    assert (error.pipeline, error.step) == ("clicks", "2-filter")


def test_keys_survive_value_steps() -> None:
    pipeline = make()
    keyed = pipeline.source("in").key_by(str).map(len).filter(bool).flat_map(lambda n: [n, n])
    assert keyed.keyed
    keyed.window(Tumbling("1s")).count().sink("out")
    assert [n.keyed for n in pipeline.compile().nodes] == [False, True, True, True, True, True, True]


def test_join_of_unkeyed_streams() -> None:
    pipeline = make()
    left = pipeline.source("a")
    right = pipeline.source("b").key_by(str)
    raises(
        lambda: left.join(right, within="1s"),
        "pipeline 'p', step '1-source': join of unkeyed streams: the left side (step '1-source') has no key; "
        "call key_by(...) on it first",
    )
    raises(
        lambda: right.join(left, within="1s"),
        "pipeline 'p', step '3-key_by': join of unkeyed streams: the right side (step '1-source') has no "
        "key; call key_by(...) on it first",
    )


def test_join_across_pipelines() -> None:
    ads, risk = make("ads"), make("risk")
    left = ads.source("clicks").key_by(str)
    right = risk.source("payments").key_by(str)
    raises(
        lambda: left.join(right, within="1s"),
        "pipeline 'ads', step '2-key_by': join across pipelines: the other stream belongs to pipeline 'risk' "
        "(step '2-key_by'); declare its topic as a second source of 'ads'",
    )


def test_join_with_itself() -> None:
    pipeline = make()
    keyed = pipeline.source("a", key=str)
    raises(
        lambda: keyed.join(keyed, within="1s"),
        "pipeline 'p', step '1-source': join of a stream with itself; the two sides would be "
        "indistinguishable",
    )


def test_join_window_must_parse() -> None:
    pipeline = make()
    left, right = pipeline.source("a", key=str), pipeline.source("b", key=str)
    raises(
        lambda: left.join(right, within="soon"),
        f"pipeline 'p', step '1-source': join within: cannot parse 'soon'; {PARSE_HINT}",
    )


def test_second_source_of_the_same_topic() -> None:
    pipeline = make()
    pipeline.source("a")
    raises(
        lambda: pipeline.source("a"),
        "pipeline 'p', step '2-source': topic 'a' is already read by step '1-source'; reuse that stream "
        "instead of a second source (each record would be processed twice)",
    )


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda p: p.source("a b"),
            "source topic 'a b' may only contain letters, digits, '.', '_' and '-' (Kafka topic rules)",
        ),
        (
            lambda p: p.source("a", format="xml"),
            "format must be one of json, avro (or pass codec=...), got 'xml'",
        ),
        (
            lambda p: p.source("a", value=dict),
            "value must be a pydantic model class or None, got <class 'dict'>",
        ),
        (
            lambda p: p.source("a", key=int),
            "key must be a pydantic model class, str, bytes or None, got <class 'int'>",
        ),
        (
            lambda p: p.source("a", value=Click, timestamp="ts"),
            "timestamp field 'ts' is not a field of Click (fields: user, page)",
        ),
        (
            lambda p: p.source("a", timestamp=5),
            "timestamp must be a field name, a function or None (Kafka timestamp), got 5",
        ),
        (
            lambda p: p.source("a", max_out_of_orderness="later"),
            f"max_out_of_orderness: cannot parse 'later'; {PARSE_HINT}",
        ),
    ],
)
def test_source_arguments(call: Callable[[Pipeline], Any], message: str) -> None:
    pipeline = make()
    raises(lambda: call(pipeline), f"pipeline 'p', step '1-source': {message}")


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda s: s.map(3), "map() expects a function, got 3"),
        (lambda s: s.filter(None), "filter() expects a function, got None"),
        (lambda s: s.branch(bool), "branch() needs at least two predicates, got 1; use filter() for one"),
        (lambda s: s.branch(bool, "x"), "branch() predicate 2 expects a function, got 'x'"),
        (
            lambda s: s.sink("x/y"),
            "sink topic 'x/y' may only contain letters, digits, '.', '_' and '-' (Kafka topic rules)",
        ),
        (
            lambda s: s.sink("out", format="csv"),
            "format must be one of json, avro (or pass codec=...), got 'csv'",
        ),
        (lambda s: s.window("1s"), "window() expects Tumbling, Hopping, Sliding or Session, got '1s'"),
        (
            lambda s: s.window(Tumbling("1s"), allowed_lateness="soon"),
            f"allowed_lateness: cannot parse 'soon'; {PARSE_HINT}",
        ),
        (lambda s: s.window(Tumbling("1s")).sum(1), "sum() expects a function, got 1"),
        (
            lambda s: s.window(Session("1m")).aggregate(list, lambda acc, v: acc),
            "aggregate() over session windows needs merge=: sessions merge when a record bridges two",
        ),
        (lambda s: s.join(42, within="1s"), "join() expects a Stream, got 42"),
    ],
)
def test_step_arguments(call: Callable[[Any], Any], message: str) -> None:
    pipeline = make()
    stream = pipeline.source("in", key=str)
    raises(lambda: call(stream), f"pipeline 'p', step '1-source': {message}")
    assert pipeline.steps == ["1-source"]  # a refused step leaves nothing behind


# --- what a worker cannot run: refused where it is declared, and in graphs read back ---------

AFTER_JOIN_HINT = (
    "is not supported by the worker yet; put a sink after the join and read that topic in another pipeline"
)
AVRO_AFTER_WINDOW = (
    "an Avro sink after the window aggregate '3-count' is not supported yet (window results are written "
    "as JSON with their window bounds); use format='json'"
)


def joined(name: str = "joins") -> tuple[Pipeline, Any, Any, Any]:
    pipeline = make(name)
    left = pipeline.source("left", value=Click).key_by(lambda c: c.user)
    right = pipeline.source("right", value=Click).key_by(lambda c: c.user)
    return pipeline, left, right, left.join(right, within="1s")


@pytest.mark.parametrize(
    ("call", "step", "message"),
    [
        (lambda pairs, right: pairs.key_by(str), "6-key_by", "a key_by after the join '5-join'"),
        # window() is refused where it is called, naming the step it windows, like a window without a key
        (lambda pairs, right: pairs.window(Tumbling("1s")), "5-join", "a window after the join '5-join'"),
        (
            lambda pairs, right: pairs.map(str).filter(bool).window(Tumbling("1s")),
            "7-filter",
            "a window after the join '5-join'",
        ),
        (lambda pairs, right: pairs.join(right, within="1s"), "6-join", "a join after the join '5-join'"),
        (  # the join on the right-hand side counts as much
            lambda pairs, right: right.join(pairs.flat_map(lambda p: [p]), within="1s"),
            "7-join",
            "a join after the join '5-join'",
        ),
    ],
)
def test_key_by_window_or_join_after_a_join_is_refused_where_it_is_declared(
    call: Callable[[Any, Any], Any], step: str, message: str
) -> None:
    pipeline, _, right, pairs = joined()
    error = raises(
        lambda: call(pairs, right), f"pipeline 'joins', step '{step}': {message} {AFTER_JOIN_HINT}"
    )
    assert (error.pipeline, error.step) == ("joins", step)
    kinds = [n.kind for n in pipeline._nodes.values()]
    assert kinds.count("join") == 1 and kinds.count("key_by") == 2  # the refused step is not added
    with pytest.raises(PipelineDefinitionError) as compiled:  # the join's output is never sunk...
        pipeline.compile()
    assert "never aggregated" not in str(compiled.value)  # ...but a refused window() is not left open


def test_after_a_join_a_sink_read_by_another_pipeline_is_the_way() -> None:
    pipeline, _, _, pairs = joined()
    pairs.map(lambda pair: pair[0].user).filter(bool).sink("pairs")
    assert [n.kind for n in pipeline.compile().nodes][-3:] == ["map", "filter", "sink"]
    downstream = make("downstream")
    downstream.source("pairs", key=str).window(Tumbling("1s")).count().sink("pair-counts")
    downstream.compile()


def windowed(name: str = "w") -> tuple[Pipeline, Any]:
    pipeline = make(name)
    keyed = pipeline.source("in", value=Click).key_by(lambda c: c.user)
    return pipeline, keyed.window(Tumbling("1s")).count()


def test_an_avro_sink_of_window_results_is_refused_where_it_is_declared() -> None:
    pipeline, counts = windowed()
    raises(lambda: counts.sink("out", format="avro"), f"pipeline 'w', step '4-sink': {AVRO_AFTER_WINDOW}")
    # The window rides along through value steps and branches, up to the sink.
    low, _high = counts.map(lambda n: n * 2).flat_map(lambda n: [n]).branch(lambda n: n < 5, bool)
    raises(lambda: low.sink("low", format="avro"), f"pipeline 'w', step '7-sink': {AVRO_AFTER_WINDOW}")
    assert pipeline.steps == ["1-source", "2-key_by", "3-count", "4-map", "5-flat_map", "6-branch"]


def test_an_avro_sink_is_fine_once_a_key_by_or_a_join_dropped_the_window() -> None:
    pipeline, counts = windowed()
    counts.sink("counts")  # JSON: the window result envelope
    counts.key_by(str).sink("rekeyed", format="avro")
    other = pipeline.source("other", key=str)
    counts.join(other, within="1s").sink("joined", format="avro")
    graph = pipeline.compile()
    assert [n.parameters.get("format") for n in graph.nodes if n.kind == "sink"] == ["json", "avro", "avro"]


def test_graphs_read_back_or_built_by_hand_are_held_to_the_same_rules() -> None:
    pipeline, _, _, pairs = joined()
    pairs.map(str).sink("pairs")
    data = pipeline.compile().model_dump(mode="json")
    data["nodes"][5]["kind"] = "key_by"  # 6-map, right after the join
    raises(
        lambda: PipelineGraph.model_validate(data),
        f"pipeline 'joins', step '6-map': a key_by after the join '5-join' {AFTER_JOIN_HINT}",
    )
    pipeline, counts = windowed()
    counts.map(str).sink("out")
    data = pipeline.compile().model_dump(mode="json")
    data["nodes"][4]["parameters"]["format"] = "avro"
    raises(
        lambda: PipelineGraph.model_validate(data),
        f"pipeline 'w', step '5-sink': {AVRO_AFTER_WINDOW}",
    )


def test_describe_refuses_such_a_module_naming_the_pipeline_and_step(tmp_path: Path) -> None:
    module = tmp_path / "join_then_key_by.py"
    module.write_text(
        "from cadenza.pipelines import Pipeline\n"
        "p = Pipeline('joins', 't', '1s')\n"
        "left, right = p.source('left', key=str), p.source('right', key=str)\n"
        "left.join(right, within='1s').key_by(str).sink('out')\n"
    )
    result = CliRunner().invoke(app, ["describe", str(module)])
    assert result.exit_code != 0
    assert "pipeline 'joins', step '4-key_by': a key_by after the join '3-join'" in " ".join(
        result.output.split()
    )
