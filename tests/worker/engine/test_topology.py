"""Splitting pipelines into sub-topologies and planning their topics (no broker)."""

from __future__ import annotations

import re

import pytest
from pydantic import BaseModel

from cadenza.pipelines import Hopping, Pipeline, PipelineDefinitionError, PipelineGraph, Tumbling
from cadenza.settings import KafkaSettings
from cadenza.worker import UnsupportedStepError, Worker
from cadenza.worker.engine.topics import plan_topics
from cadenza.worker.engine.topology import check_copartitioned, check_no_cycles_across, split, upstream_source


class Click(BaseModel):
    user: str
    page: str
    ts: float


def stateless() -> Pipeline:
    p = Pipeline("stateless", tenant="t", latency_target="1s")
    p.source("in", value=Click).filter(lambda c: c.page != "/").map(lambda c: c.user).sink("out")
    return p


def windowed() -> Pipeline:
    p = Pipeline("windowed", tenant="t", latency_target="1s")
    (
        p.source("clicks", value=Click, timestamp="ts")
        .filter(lambda c: True)
        .key_by(lambda c: c.user)
        .window(Tumbling("1s"))
        .count()
        .map(lambda n: n * 2)
        .sink("counts")
    )
    return p


def test_a_stateless_pipeline_is_one_sub_topology_reading_its_source() -> None:
    (sub,) = split(stateless().compile())
    assert sub.input_topic == "in"
    assert sub.input_kind == "source"
    assert sub.entry == "1-source"
    assert sub.nodes == ("1-source", "2-filter", "3-map", "4-sink")
    assert sub.sink_topics == ("out",)
    assert sub.repartition_topics == ()
    assert sub.stateful == ()
    assert not sub.needs_event_time


def test_key_by_ends_a_sub_topology_and_its_repartition_topic_starts_the_next() -> None:
    first, second = split(windowed().compile())
    assert first.nodes == ("1-source", "2-filter", "3-key_by")
    assert first.repartition_topics == ("windowed.3-key_by.repartition",)
    assert first.sink_topics == ()
    assert first.stateful == ()
    # Event time is read at the source because the window downstream of the repartition needs it.
    assert first.needs_event_time
    assert second.input_topic == "windowed.3-key_by.repartition"
    assert second.input_kind == "repartition"
    assert second.entry == "3-key_by"
    assert second.nodes == ("4-count", "5-map", "6-sink")
    assert second.stateful == ("4-count",)
    assert second.needs_event_time


def test_two_key_bys_make_three_sub_topologies_and_fan_out_stays_together() -> None:
    p = Pipeline("chain", tenant="t", latency_target="1s")
    s = p.source("in", value=Click)
    s.map(lambda c: c).sink("copy")
    keyed = s.key_by(lambda c: c.user)
    counts = keyed.window(Hopping("2s", "1s")).count()
    counts.sink("counts")
    counts.key_by(lambda n: n).map(lambda n: n).sink("by-count")
    low, high = s.branch(lambda c: c.page == "/", lambda c: True)
    low.sink("root-pages")
    high.sink("other-pages")
    subs = split(p.compile())
    assert [s.input_kind for s in subs] == ["source", "repartition", "repartition"]
    assert set(subs[0].sink_topics) == {"copy", "root-pages", "other-pages"}
    assert subs[0].needs_event_time  # the window is two hops away
    assert subs[1].sink_topics == ("counts",)
    assert len(subs[1].repartition_topics) == 1
    assert subs[2].sink_topics == ("by-count",)
    assert not subs[2].needs_event_time
    graph = p.compile()
    assert upstream_source(graph, subs[1].stateful[0]) == "1-source"


def joined() -> Pipeline:
    p = Pipeline("joins", tenant="t", latency_target="1s")
    left = p.source("left", value=Click, timestamp="ts").key_by(lambda c: c.user)
    right = p.source("right", value=Click, timestamp="ts").key_by(lambda c: c.user)
    left.join(right, within="1s").map(lambda pair: pair[0].page).sink("pairs")
    return p


def test_a_join_runs_in_the_sub_topologies_of_both_of_its_inputs() -> None:
    graph = joined().compile()
    subs = split(graph)
    readers = [s for s in subs if s.input_kind == "repartition"]
    assert len(readers) == 2
    for sub in readers:
        assert sub.nodes == ("5-join", "6-map", "7-sink")
        assert sub.stateful == ("5-join",)
        assert sub.sink_topics == ("pairs",)
    # Event time is computed at both sources, since the join downstream of their key_bys needs it.
    assert all(s.needs_event_time for s in subs)
    counts = {s.input_topic: 4 for s in subs}
    check_copartitioned(graph, subs, counts)
    counts[readers[1].input_topic] = 2
    with pytest.raises(
        UnsupportedStepError, match=r"step '5-join': the join's inputs are not co-partitioned"
    ):
        check_copartitioned(graph, subs, counts)


def test_topic_plan_sizes_internal_topics_after_their_input() -> None:
    graph = windowed().compile()
    specs = {s.name: s for s in plan_topics([(graph, split(graph))], {"clicks": 3}, default_partitions=4)}
    assert specs["clicks"].partitions == 3  # existing: used as it is
    assert specs["counts"].partitions == 4  # missing: the default
    assert specs["windowed.3-key_by.repartition"].partitions == 3
    changelog = specs["windowed.4-count.changelog"]
    assert changelog.partitions == 3
    assert changelog.configs == {"cleanup.policy": "compact"}
    assert specs["windowed.dlq"].partitions == 4
    assert specs["windowed.late"].partitions == 4
    assert specs["clicks"].configs == {}


def test_worker_describes_what_it_runs() -> None:
    worker = Worker([stateless(), windowed()], KafkaSettings())
    text = worker.describe()
    assert "pipeline stateless (tenant t" in text
    assert (
        "reads windowed.3-key_by.repartition (repartition) -> 4-count -> 5-map -> 6-sink -> writes counts"
        in text
    )
    assert "dead letters -> windowed.dlq; late records -> windowed.late" in text
    assert worker.layout.input_topics == ["in", "clicks", "windowed.3-key_by.repartition"]


def test_duplicate_pipeline_names_are_refused() -> None:
    with pytest.raises(Exception, match="more than once"):
        Worker([stateless(), stateless()], KafkaSettings())


# --- cycles across the pipelines of one worker ----------------------------------------------


def relay(name: str, source: str, sink: str) -> PipelineGraph:
    p = Pipeline(name, tenant="t", latency_target="1s")
    p.source(source, value=Click).map(lambda c: c).sink(sink)
    return p.compile()


def test_two_pipelines_feeding_each_other_are_refused_naming_pipelines_and_topics() -> None:
    graphs = [relay("a", "x", "y"), relay("b", "y", "x")]
    message = (
        "pipelines 'a' and 'b' feed each other in a cycle: topic 'x' -> pipeline 'a' -> topic 'y' -> "
        "pipeline 'b' -> topic 'x'; every record on it would go round forever. Write one of these sinks "
        "to another topic"
    )
    with pytest.raises(PipelineDefinitionError, match=f"^{re.escape(message)}$"):
        check_no_cycles_across(graphs)
    # The worker plans its topics with it, so it refuses them before creating any topic.
    with pytest.raises(PipelineDefinitionError, match=re.escape(message)):
        plan_topics([(g, split(g)) for g in graphs], {}, default_partitions=1)
    check_no_cycles_across(graphs[:1])  # each one alone is fine
    check_no_cycles_across(graphs[1:])


def test_a_cycle_through_repartitions_joins_and_three_pipelines_is_found() -> None:
    counts = Pipeline("counts", tenant="t", latency_target="1s")
    (
        counts.source("clicks", value=Click, timestamp="ts")
        .key_by(lambda c: c.user)
        .window(Tumbling("1s"))
        .count()
        .sink("per-user")
    )
    joins = Pipeline("joins", tenant="t", latency_target="1s")
    left = joins.source("per-user", key=str)
    right = joins.source("users", key=str)
    left.join(right, within="1s").map(str).sink("enriched")
    back = relay("back", "enriched", "clicks")
    with pytest.raises(
        PipelineDefinitionError,
        match=re.escape(
            "pipelines 'counts', 'joins' and 'back' feed each other in a cycle: topic 'clicks' -> pipeline "
            "'counts' -> topic 'per-user' -> pipeline 'joins' -> topic 'enriched' -> pipeline 'back' -> "
            "topic 'clicks';"
        ),
    ):
        check_no_cycles_across([counts.compile(), joins.compile(), back])


def test_a_spark_stage_carries_records_across_so_it_can_close_a_cycle() -> None:
    staged = Pipeline("staged", tenant="t", latency_target="1s")
    staged.source("x", value=Click).on_spark(lambda df: df, topic="spark-out", value=Click).sink("y")
    with pytest.raises(
        PipelineDefinitionError,
        match=re.escape(
            "pipelines 'staged' and 'b' feed each other in a cycle: topic 'x' -> pipeline 'staged' -> topic "
            "'staged.2-spark_stage.spark-in' -> Spark stage '2-spark_stage' of pipeline 'staged' -> topic "
            "'spark-out' -> pipeline 'staged' -> topic 'y' -> pipeline 'b' -> topic 'x';"
        ),
    ):
        check_no_cycles_across([staged.compile(), relay("b", "y", "x")])


def test_topics_that_do_not_feed_back_are_no_cycle() -> None:
    # A chain; and a pipeline with two unrelated flows (x -> y, z -> w) that another links (y -> z):
    # records of x never come back to x.
    two_flows = Pipeline("two-flows", tenant="t", latency_target="1s")
    two_flows.source("x", value=Click).sink("y")
    two_flows.source("z", value=Click).sink("w")
    check_no_cycles_across([relay("a", "x", "y"), relay("b", "y", "z"), relay("c", "x", "z")])
    check_no_cycles_across([two_flows.compile(), relay("link", "y", "z")])
    # Retrying dead letters into a source is deliberate: dead-letter and late topics link nothing.
    check_no_cycles_across([relay("a", "x", "y"), relay("retry", "a.dlq", "x"), relay("late", "a.late", "x")])
    check_no_cycles_across([])
