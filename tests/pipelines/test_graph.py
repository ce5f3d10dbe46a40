"""The graph checks itself when read back or built by hand: a worker must never run a cyclic graph."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cadenza.pipelines import Pipeline, PipelineDefinitionError, PipelineGraph, Stream, Tumbling


def node(node_id: str, upstream: list[str], downstream: list[str], kind: str = "map") -> dict[str, Any]:
    return {"id": node_id, "kind": kind, "name": node_id, "upstream": upstream, "downstream": downstream}


def graph_data(nodes: list[dict[str, Any]], edges: list[tuple[str, str]]) -> dict[str, Any]:
    return {
        "name": "hand-made",
        "tenant": "t",
        "tenant_weight": 1.0,
        "latency_target_s": 1.0,
        "dead_letter_topic": "hand-made.dlq",
        "late_topic": "hand-made.late",
        "nodes": nodes,
        "edges": [{"source": s, "target": t} for s, t in edges],
        "source_topics": ["in"],
        "sink_topics": ["out"],
        "internal_topics": [],
    }


def test_a_cycle_is_refused_naming_its_steps() -> None:
    data = graph_data(
        [
            node("1-source", [], ["2-map"], kind="source"),
            node("2-map", ["1-source", "4-map"], ["3-map"]),
            node("3-map", ["2-map"], ["4-map"]),
            node("4-map", ["3-map"], ["2-map", "5-sink"]),
            node("5-sink", ["4-map"], [], kind="sink"),
        ],
        [
            ("1-source", "2-map"),
            ("4-map", "2-map"),
            ("2-map", "3-map"),
            ("3-map", "4-map"),
            ("4-map", "5-sink"),
        ],
    )
    message = (
        "pipeline 'hand-made', step '2-map': cycle through steps 2-map -> 3-map -> 4-map -> 2-map; a "
        "pipeline must be a DAG"
    )
    with pytest.raises(PipelineDefinitionError, match=f"^{re.escape(message)}$") as info:
        PipelineGraph.model_validate(data)
    assert info.value.step == "2-map"


def test_a_self_loop_is_a_cycle() -> None:
    data = graph_data(
        [node("1-source", [], ["2-map"], kind="source"), node("2-map", ["1-source", "2-map"], ["2-map"])],
        [("1-source", "2-map"), ("2-map", "2-map")],
    )
    with pytest.raises(PipelineDefinitionError, match=re.escape("cycle through steps 2-map -> 2-map")):
        PipelineGraph.model_validate(data)


def test_edges_to_unknown_steps_are_refused() -> None:
    data = graph_data([node("1-source", [], ["9-map"], kind="source")], [("1-source", "9-map")])
    message = "pipeline 'hand-made', step '9-map': edge 1-source -> 9-map refers to an unknown step"
    with pytest.raises(PipelineDefinitionError, match=f"^{re.escape(message)}$"):
        PipelineGraph.model_validate(data)


def test_node_lists_must_agree_with_edges() -> None:
    data = graph_data(
        [node("1-source", [], [], kind="source"), node("2-sink", ["1-source"], [], kind="sink")],
        [("1-source", "2-sink")],
    )
    message = "pipeline 'hand-made', step '1-source': upstream/downstream ids do not match the edges"
    with pytest.raises(PipelineDefinitionError, match=f"^{re.escape(message)}$"):
        PipelineGraph.model_validate(data)


def test_duplicate_ids_are_refused() -> None:
    data = graph_data([node("1-source", [], [], kind="source"), node("1-source", [], [], kind="sink")], [])
    with pytest.raises(PipelineDefinitionError, match=re.escape("duplicate step ids ['1-source']")):
        PipelineGraph.model_validate(data)


def test_unknown_node_lookup() -> None:
    pipeline = Pipeline("p", "t", "1s")
    pipeline.source("in").sink("out")
    with pytest.raises(KeyError, match="has no step '7-map'"):
        pipeline.compile().node("7-map")


# A random pipeline built only through the public API: whatever the user does, the compiled graph is
# acyclic, its topological order respects every edge, and node and edge lists agree.
operations = st.lists(
    st.tuples(
        st.sampled_from(["map", "filter", "key_by", "window", "join", "branch", "fan_out"]),
        st.integers(0, 50),
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=150, deadline=None)
@given(operations)
def test_any_declared_pipeline_compiles_to_a_consistent_dag(ops: list[tuple[str, int]]) -> None:
    pipeline = Pipeline("random", tenant="t", latency_target="1s")
    open_ends: list[Stream[Any]] = [pipeline.source("in", key=str)]
    for op, pick in ops:
        stream = open_ends.pop(pick % len(open_ends))
        taken = [stream]
        try:
            if op == "map":
                open_ends.append(stream.map(str))
            elif op == "filter":
                open_ends.append(stream.filter(bool))
            elif op == "key_by":
                open_ends.append(stream.key_by(str))
            elif op == "window":
                open_ends.append(stream.window(Tumbling("1s")).count())
            elif op == "join" and open_ends:
                other = open_ends.pop(pick % len(open_ends))
                taken.append(other)
                if (other.step, other.port) == (stream.step, stream.port):
                    open_ends.append(stream)
                else:
                    open_ends.append(stream.join(other, within="1s"))
            elif op == "branch":
                open_ends.extend(stream.branch(bool, callable))
            else:
                open_ends.extend([stream, stream.map(str)])
        except PipelineDefinitionError as error:  # only what a worker cannot run after a join
            assert "after the join" in str(error)
            open_ends.extend(taken)
    for index, stream in enumerate(open_ends):
        stream.sink(f"out-{index}")
    graph = pipeline.compile()

    order = graph.topological_order()
    assert sorted(order) == sorted(n.id for n in graph.nodes)
    for edge in graph.edges:
        assert order.index(edge.source) < order.index(edge.target)
    assert all(node.kind == "sink" for node in graph.nodes if not node.downstream)
    assert PipelineGraph.model_validate_json(graph.model_dump_json()).model_dump() == graph.model_dump()
    stateful = [n.id for n in graph.nodes if n.stateful]
    changelogs = [t.node_id for t in graph.internal_topics if t.kind == "changelog"]
    assert stateful == changelogs
