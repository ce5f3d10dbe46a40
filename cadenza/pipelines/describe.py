"""Plain-text rendering of compiled pipelines, for ``cadenza describe`` and for logs.

Steps are listed in topological order with arrows to their consumers rather than drawn as a tree: a
join has two parents and would appear twice in a tree, while a list shows every step once and still
reads top to bottom. Durations are printed the way they are written in code.
"""

from __future__ import annotations

from collections.abc import Iterable

from cadenza.pipelines._format import format_duration
from cadenza.pipelines.graph import NodeSpec, PipelineGraph
from cadenza.pipelines.parallel import ParallelSpec
from cadenza.pipelines.pipeline import Pipeline

_TOPIC_KIND_LABELS = {
    "repartition": "repartition",
    "changelog": "changelog, compacted",
    "dead_letter": "dead letters",
    "late": "late records",
}


def describe(graphs: Iterable[PipelineGraph | Pipeline] | PipelineGraph | Pipeline) -> str:
    """Render each pipeline (compiling ``Pipeline`` objects first) as a block of text."""
    if isinstance(graphs, PipelineGraph | Pipeline):
        graphs = [graphs]
    blocks = [_describe_one(g.compile() if isinstance(g, Pipeline) else g) for g in graphs]
    return "\n\n".join(blocks) + "\n" if blocks else "no pipelines\n"


def _describe_one(graph: PipelineGraph) -> str:
    lines = [
        f"pipeline {graph.name}",
        f"  tenant:          {graph.tenant} (weight {graph.tenant_weight:g})",
        f"  latency target:  {format_duration(graph.latency_target_s)}",
        f"  sources:         {', '.join(graph.source_topics)}",
        f"  sinks:           {', '.join(graph.sink_topics)}",
    ]
    if graph.on_error == "stop":
        lines.append("  on error:        stop the pipeline (failed records are not dead-lettered)")
    for index, topic in enumerate(graph.internal_topics):
        label = "  internal topics: " if index == 0 else " " * 19
        lines.append(f"{label}{topic.name} ({_TOPIC_KIND_LABELS[topic.kind]})")
    lines.append("  steps:")
    rows = [(node_id, _details(graph, graph.node(node_id))) for node_id in graph.topological_order()]
    id_width = max(len(node_id) for node_id, _ in rows)
    detail_width = max(len(detail) for _, detail in rows)
    for node_id, detail in rows:
        arrows = _arrows(graph, node_id)
        row = f"    {node_id:<{id_width}}  {detail:<{detail_width}}"
        lines.append(f"{row}  -> {arrows}".rstrip() if arrows else row.rstrip())
    if graph.spark_stages:
        lines.append("  spark stages:")
        for stage in graph.spark_stages:
            options = [f"mode {stage.output_mode}"]
            if stage.watermark_s is not None:
                options.append(f"watermark {_seconds(stage.watermark_s)}")
            if stage.event_time_field is not None:
                options.append(f"event_time={stage.event_time_field}")
            lines.append(
                f"    {stage.id}  {stage.transform}: {stage.input_topic} -> {stage.output_topic} "
                f"({', '.join(options)}), read back by {stage.output_node}"
            )
    return "\n".join(lines)


def _details(graph: PipelineGraph, node: NodeSpec) -> str:
    text = _what(graph, node)
    spec = ParallelSpec.of(node.parameters)
    return text if spec.inline else f"{text}, {spec.describe()}"


def _what(graph: PipelineGraph, node: NodeSpec) -> str:
    p = node.parameters
    if node.kind == "source":
        parts = [f"topic={p['topic']}", f"format={p['format']}"]
        if p["value"] is not None:
            parts.append(f"value={str(p['value']).rsplit('.', 1)[-1]}")
        if p["key"] is not None:
            parts.append(f"key={str(p['key']).rsplit('.', 1)[-1]}")
        if p["timestamp"] == "field":
            parts.append(f"event_time={p['timestamp_field']}")
        elif p["timestamp"] == "callable":
            parts.append("event_time=function")
        if p["max_out_of_orderness_s"]:
            parts.append(f"max_out_of_orderness={_seconds(p['max_out_of_orderness_s'])}")
        return " ".join(parts)
    if node.kind == "sink":
        if p.get("spark_stage") is not None:
            return f"on_spark {node.name} via topic={p['topic']}"
        return f"topic={p['topic']} format={p['format']}"
    if node.kind == "window_aggregate":
        spec = node.window_spec()
        window = "" if spec is None else spec.describe()
        text = f"{node.name} over {window}"
        if p["function"] is not None:
            text += f" of {p['function']}"
        if p["allowed_lateness_s"]:
            text += f", lateness {_seconds(p['allowed_lateness_s'])}"
        return text
    if node.kind == "join":
        left, right = node.upstream
        how = p.get("how", "inner")
        text = f"{'' if how == 'inner' else f'{how} '}{left} with {right} within {_seconds(p['within_s'])}"
        if p["on"] is not None:
            text += f" on {p['on']}"
        if p.get("joiner") is not None:
            text += f" into {p['joiner']}"
        return text
    if node.kind == "branch":
        return f"branch by {', '.join(str(name) for name in _as_list(p['predicates']))}"
    if node.kind == "key_by":
        return f"key_by {node.name} (repartition)"
    if node.kind == "process":
        return f"process {p['processor']} (keyed state, timers)"
    return f"{node.kind} {node.name}"


def _arrows(graph: PipelineGraph, node_id: str) -> str:
    node = graph.node(node_id)
    if node.kind != "branch":
        return ", ".join(node.downstream)
    targets = [
        f"[{e.port + 1}] {e.target}" for e in sorted(graph.edges, key=lambda e: e.port) if e.source == node_id
    ]
    return ", ".join(targets)


def _seconds(value: object) -> str:
    return format_duration(float(value)) if isinstance(value, int | float) else str(value)


def _as_list(value: object) -> list[object]:
    return list(value) if isinstance(value, list) else [value]
