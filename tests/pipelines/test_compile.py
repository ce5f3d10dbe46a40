"""Compiled shapes: exact ids, edges and topics, since workers create topics and route by them."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel

from cadenza.pipelines import Pipeline, PipelineDefinitionError, PipelineGraph, Session, Tumbling
from cadenza.pipelines.graph import EdgeSpec, InternalTopic


class Click(BaseModel):
    user: str
    page: str


class Payment(BaseModel):
    user: str
    amount: float


def clicks_pipeline() -> Pipeline:
    clicks = Pipeline("clicks-per-user", tenant="ads", latency_target="250ms")
    (
        clicks.source("clicks", value=Click)
        .filter(lambda c: c.page != "/health")
        .key_by(lambda c: c.user)
        .window(Tumbling("1s"), allowed_lateness="200ms")
        .count()
        .sink("clicks-per-user")
    )
    return clicks


def test_example_compiles_to_expected_nodes_topics_and_edges() -> None:
    graph = clicks_pipeline().compile()

    assert (graph.name, graph.tenant, graph.tenant_weight, graph.latency_target_s) == (
        "clicks-per-user",
        "ads",
        1.0,
        0.25,
    )
    assert [(n.id, n.kind) for n in graph.nodes] == [
        ("1-source", "source"),
        ("2-filter", "filter"),
        ("3-key_by", "key_by"),
        ("4-count", "window_aggregate"),
        ("5-sink", "sink"),
    ]
    assert [(n.upstream, n.downstream) for n in graph.nodes] == [
        ([], ["2-filter"]),
        (["1-source"], ["3-key_by"]),
        (["2-filter"], ["4-count"]),
        (["3-key_by"], ["5-sink"]),
        (["4-count"], []),
    ]
    assert graph.edges == [
        EdgeSpec(source="1-source", target="2-filter"),
        EdgeSpec(source="2-filter", target="3-key_by"),
        EdgeSpec(source="3-key_by", target="4-count"),
        EdgeSpec(source="4-count", target="5-sink"),
    ]
    assert graph.source_topics == ["clicks"]
    assert graph.sink_topics == ["clicks-per-user"]
    assert graph.dead_letter_topic == "clicks-per-user.dlq"
    assert graph.late_topic == "clicks-per-user.late"
    assert graph.internal_topics == [
        InternalTopic(name="clicks-per-user.3-key_by.repartition", kind="repartition", node_id="3-key_by"),
        InternalTopic(
            name="clicks-per-user.4-count.changelog", kind="changelog", node_id="4-count", compacted=True
        ),
        InternalTopic(name="clicks-per-user.dlq", kind="dead_letter"),
        InternalTopic(name="clicks-per-user.late", kind="late"),
    ]
    assert graph.internal_topic_names == [
        "clicks-per-user.3-key_by.repartition",
        "clicks-per-user.4-count.changelog",
        "clicks-per-user.dlq",
        "clicks-per-user.late",
    ]


def test_example_node_parameters() -> None:
    graph = clicks_pipeline().compile()
    source, filter_, key_by, count, sink = graph.nodes
    assert source.name == "clicks"
    assert source.parameters == {
        "topic": "clicks",
        "format": "json",
        "value": f"{__name__}.Click",
        "key": None,
        "timestamp": "kafka",
        "timestamp_field": None,
        "max_out_of_orderness_s": 0.0,
    }
    assert not source.keyed
    assert (filter_.keyed, filter_.parameters) == (False, {"function": "<lambda>"})
    assert (key_by.keyed, key_by.repartition_topic) == (True, "clicks-per-user.3-key_by.repartition")
    assert count.parameters == {
        "aggregation": "count",
        "window": {"kind": "tumbling", "size_s": 1.0},
        "allowed_lateness_s": 0.2,
        "function": None,
    }
    assert (count.keyed, count.stateful, count.changelog_topic) == (
        True,
        True,
        "clicks-per-user.4-count.changelog",
    )
    assert count.window_spec() == Tumbling("1s")
    assert source.window_spec() is None
    assert sink.parameters == {"topic": "clicks-per-user", "format": "json"}
    assert [n.stateful for n in graph.nodes] == [False, False, False, True, False]


def test_functions_side_table_holds_user_code_per_node() -> None:
    graph = clicks_pipeline().compile()
    assert sorted(graph.functions) == ["1-source", "2-filter", "3-key_by", "4-count", "5-sink"]
    assert graph.functions["1-source"].value_model is Click
    assert graph.functions["1-source"].timestamp is None
    keep = graph.functions["2-filter"].fn
    assert keep is not None
    assert keep(Click(user="u", page="/home")) is True
    assert keep(Click(user="u", page="/health")) is False
    key = graph.functions["3-key_by"].fn
    assert key is not None
    assert key(Click(user="ann", page="/")) == "ann"


def run_aggregate(graph: PipelineGraph, node_id: str, values: list[Any]) -> Any:
    """Fold values the way a window operator would, in two halves merged, to exercise merge too."""
    f = graph.functions[node_id]
    assert f.init is not None
    assert f.add is not None
    assert f.merge is not None
    assert f.result is not None
    half = len(values) // 2
    left, right = f.init(), f.init()
    for value in values[:half]:
        left = f.add(left, value)
    for value in values[half:]:
        right = f.add(right, value)
    return f.result(f.merge(left, right))


def test_builtin_aggregations_come_as_init_add_merge_result() -> None:
    pipeline = Pipeline("payments", tenant="t", latency_target="1s")
    keyed = pipeline.source("payments", value=Payment).key_by(lambda p: p.user)
    window = keyed.window(Session("10s"))
    window.count().sink("count")
    window.sum(lambda p: p.amount).sink("sum")
    window.min(lambda p: p.amount).sink("min")
    window.max(lambda p: p.amount).sink("max")
    window.mean(lambda p: p.amount).sink("mean")
    window.aggregate(list, lambda acc, p: [*acc, p.amount], lambda a, b: a + b).sink("all")
    graph = pipeline.compile()
    values = [Payment(user="u", amount=a) for a in (3.0, 1.0, 4.0, 1.5)]
    assert [n.id for n in graph.nodes if n.kind == "window_aggregate"] == [
        "3-count",
        "5-sum",
        "7-min",
        "9-max",
        "11-mean",
        "13-aggregate",
    ]
    assert run_aggregate(graph, "3-count", values) == 4
    assert run_aggregate(graph, "5-sum", values) == 9.5
    assert run_aggregate(graph, "7-min", values) == 1.0
    assert run_aggregate(graph, "9-max", values) == 4.0
    assert run_aggregate(graph, "11-mean", values) == 2.375
    assert run_aggregate(graph, "13-aggregate", values) == [3.0, 1.0, 4.0, 1.5]
    assert run_aggregate(graph, "7-min", values[:1]) == 3.0  # merge with an empty side
    assert graph.functions["5-sum"].fn is not None
    assert graph.functions["3-count"].fn is None
    assert graph.node("5-sum").parameters["function"] == "<lambda>"


def test_branch_graph_records_ports() -> None:
    pipeline = Pipeline("router", tenant="t", latency_target="1s")
    big, small = pipeline.source("payments", value=Payment).branch(
        lambda p: p.amount >= 100, lambda p: p.amount < 100, name="by_amount"
    )
    big.sink("big-payments")
    small.map(lambda p: p.amount).sink("small-amounts")
    graph = pipeline.compile()

    assert [n.id for n in graph.nodes] == ["1-source", "2-branch", "3-sink", "4-map", "5-sink"]
    branch = graph.node("2-branch")
    assert branch.name == "by_amount"
    assert branch.parameters == {"branches": 2, "predicates": ["<lambda>", "<lambda>"]}
    assert branch.downstream == ["3-sink", "4-map"]
    assert graph.edges == [
        EdgeSpec(source="1-source", target="2-branch"),
        EdgeSpec(source="2-branch", target="3-sink", port=0),
        EdgeSpec(source="2-branch", target="4-map", port=1),
        EdgeSpec(source="4-map", target="5-sink"),
    ]
    assert graph.sink_topics == ["big-payments", "small-amounts"]
    predicates = graph.functions["2-branch"].predicates
    assert [p(Payment(user="u", amount=150)) for p in predicates] == [True, False]
    assert (big.step, big.port, small.port) == ("2-branch", 0, 1)


def test_join_graph_has_left_and_right_inputs() -> None:
    pipeline = Pipeline("click-pay", tenant="ads", latency_target="500ms")
    clicks = pipeline.source("clicks", value=Click).key_by(lambda c: c.user)
    payments = pipeline.source("payments", value=Payment, key=str)
    joined = clicks.join(payments, within="5s", on=lambda c, p: p.amount > 0, allowed_lateness="1s")
    joined.map(lambda pair: pair[1].amount).sink("paid-clicks")
    graph = pipeline.compile()

    assert [n.id for n in graph.nodes] == ["1-source", "2-key_by", "3-source", "4-join", "5-map", "6-sink"]
    join = graph.node("4-join")
    assert join.upstream == ["2-key_by", "3-source"]
    assert join.parameters == {
        "within_s": 5.0,
        "allowed_lateness_s": 1.0,
        "on": "<lambda>",
        "how": "inner",
        "joiner": None,
    }
    assert (join.keyed, join.stateful, join.changelog_topic) == (True, True, "click-pay.4-join.changelog")
    assert graph.edges[1:3] == [
        EdgeSpec(source="2-key_by", target="4-join", input=0),
        EdgeSpec(source="3-source", target="4-join", input=1),
    ]
    assert graph.node("3-source").keyed
    assert graph.node("3-source").parameters["key"] == "str"
    assert graph.functions["3-source"].key_model is str
    assert graph.functions["1-source"].key_model is None
    assert graph.source_topics == ["clicks", "payments"]
    assert graph.internal_topic_names == [
        "click-pay.2-key_by.repartition",
        "click-pay.4-join.changelog",
        "click-pay.dlq",
        "click-pay.late",
    ]


def pay_total(click: Click | None, payment: Payment | None) -> float:
    return 0.0 if payment is None else payment.amount


def test_join_takes_a_joiner_and_how_and_refuses_other_hows() -> None:
    pipeline = Pipeline("click-pay", tenant="ads", latency_target="500ms")
    clicks = pipeline.source("clicks", value=Click).key_by(lambda c: c.user)
    payments = pipeline.source("payments", value=Payment, key=str)
    clicks.join(payments, within="5s", joiner=pay_total, how="outer").sink("totals")
    graph = pipeline.compile()
    join = graph.node("4-join")
    assert (join.parameters["how"], join.parameters["joiner"]) == ("outer", "pay_total")
    assert graph.functions["4-join"].fn is pay_total
    with pytest.raises(
        PipelineDefinitionError, match="join how must be 'inner', 'left' or 'outer', got 'full'"
    ):
        clicks.join(payments, within="5s", how="full")  # type: ignore[call-overload]
    with pytest.raises(PipelineDefinitionError, match="joiner"):
        clicks.join(payments, within="5s", joiner="pay_total")  # type: ignore[call-overload]


def test_join_of_two_branches_of_one_step() -> None:
    pipeline = Pipeline("self-match", tenant="t", latency_target="1s")
    left, right = pipeline.source("payments", value=Payment, key=str).branch(
        lambda p: p.amount > 0, lambda p: p.amount <= 0
    )
    left.join(right, within="1s").sink("matched")
    graph = pipeline.compile()
    assert graph.node("3-join").upstream == ["2-branch", "2-branch"]
    assert graph.node("2-branch").downstream == ["3-join"]
    assert graph.edges[1:3] == [
        EdgeSpec(source="2-branch", target="3-join", port=0, input=0),
        EdgeSpec(source="2-branch", target="3-join", port=1, input=1),
    ]
    assert graph.topological_order() == ["1-source", "2-branch", "3-join", "4-sink"]


def test_topological_order_and_downstream_of_a_diamond() -> None:
    pipeline = Pipeline("diamond", tenant="t", latency_target="1s")
    keyed = pipeline.source("in", value=Click, key=str)
    doubled = keyed.map(lambda c: c, name="left")
    other = keyed.filter(lambda c: True, name="right")
    doubled.join(other, within="1s").sink("out")
    keyed.sink("copy")
    graph = pipeline.compile()

    assert graph.topological_order() == ["1-source", "2-map", "3-filter", "4-join", "5-sink", "6-sink"]
    assert graph.downstream("1-source") == ["2-map", "3-filter", "6-sink"]
    assert graph.downstream("4-join") == ["5-sink"]
    assert graph.upstream("4-join") == ["2-map", "3-filter"]
    assert graph.sink_topics == ["out", "copy"]
    order = graph.topological_order()
    for edge in graph.edges:
        assert order.index(edge.source) < order.index(edge.target)


def test_fan_out_to_the_same_sink_topic_lists_it_once() -> None:
    pipeline = Pipeline("fan", tenant="t", latency_target="1s")
    stream = pipeline.source("in")
    stream.map(str).sink("out")
    stream.filter(bool).sink("out")
    assert pipeline.compile().sink_topics == ["out"]


def test_json_serialization_excludes_callables_and_round_trips() -> None:
    graph = clicks_pipeline().compile()
    text = graph.model_dump_json()
    data = json.loads(text)
    assert "functions" not in data
    assert sorted(data) == [
        "dead_letter_topic",
        "edges",
        "internal_topics",
        "late_topic",
        "latency_target_s",
        "name",
        "nodes",
        "sink_topics",
        "source_topics",
        "tenant",
        "tenant_weight",
    ]
    assert "function <lambda>" not in text
    assert "<function" not in text
    restored = PipelineGraph.model_validate_json(text)
    assert restored.functions == {}
    assert restored.model_dump() == graph.model_dump()
    assert restored.node("4-count").window_spec() == Tumbling("1s")
    assert "functions" not in PipelineGraph.model_json_schema()["properties"]


def test_compile_is_repeatable_and_the_pipeline_can_grow() -> None:
    pipeline = clicks_pipeline()
    first = pipeline.compile()
    assert pipeline.compile().model_dump() == first.model_dump()
    assert pipeline.steps == ["1-source", "2-filter", "3-key_by", "4-count", "5-sink"]


def test_custom_topics_and_weight() -> None:
    pipeline = Pipeline(
        "p",
        tenant="t",
        latency_target=2,
        tenant_weight=3,
        dead_letter_topic="errors",
        late_topic="stragglers",
    )
    pipeline.source("in").sink("out")
    graph = pipeline.compile()
    assert (graph.tenant_weight, graph.latency_target_s) == (3.0, 2.0)
    assert graph.internal_topics == [
        InternalTopic(name="errors", kind="dead_letter"),
        InternalTopic(name="stragglers", kind="late"),
    ]


def test_source_timestamp_options() -> None:
    pipeline = Pipeline("ts", tenant="t", latency_target="1s")
    pipeline.source("a", value=Click, timestamp="page", max_out_of_orderness="2s").sink("a-out")
    pipeline.source("b", timestamp=lambda v: v["when"]).sink("b-out")
    pipeline.source("c", timestamp="when").sink("c-out")
    graph = pipeline.compile()
    a, b = graph.node("1-source"), graph.node("3-source")
    assert (a.parameters["timestamp"], a.parameters["timestamp_field"]) == ("field", "page")
    assert a.parameters["max_out_of_orderness_s"] == 2.0
    assert (b.parameters["timestamp"], b.parameters["timestamp_field"]) == ("callable", None)
    get_a = graph.functions["1-source"].timestamp
    get_b = graph.functions["3-source"].timestamp
    get_c = graph.functions["5-source"].timestamp
    assert get_a is not None
    assert get_b is not None
    assert get_c is not None
    assert get_a(Click(user="u", page="/x")) == "/x"
    assert get_b({"when": 12.5}) == 12.5
    assert get_c({"when": 7}) == 7


def test_stream_handles_are_immutable_and_reusable() -> None:
    pipeline = Pipeline("reuse", tenant="t", latency_target="1s")
    source = pipeline.source("in", value=Click)
    mapped = source.map(lambda c: c.user)
    filtered = source.filter(lambda c: True)
    assert (source.step, mapped.step, filtered.step) == ("1-source", "2-map", "3-filter")
    assert repr(mapped) == "Stream(pipeline='reuse', step='2-map')"
    assert mapped.pipeline is pipeline
    assert not source.keyed
