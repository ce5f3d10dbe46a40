"""Splitting a compiled pipeline into sub-topologies at its repartition points, like Kafka Streams.

A ``key_by`` changes which partition a record belongs in, so the records after it cannot run where
the records before it were read. The ``key_by`` therefore ends its sub-topology by writing to its
repartition topic, keyed by the new key, and the steps after it form a new sub-topology that reads
that topic. Within a sub-topology every record stays in the partition it was read from, which is what
lets keyed state and watermarks live per input partition.

:func:`check_no_cycles_across` looks at all the pipelines of one worker together: records must not
go round from one pipeline's sink to another's source and back.

Pure logic over :class:`~cadenza.pipelines.PipelineGraph`: no Kafka here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from cadenza.errors import CadenzaError
from cadenza.pipelines import PipelineDefinitionError, PipelineGraph

__all__ = [
    "SubTopology",
    "UnsupportedStepError",
    "check_copartitioned",
    "check_no_cycles_across",
    "join_inputs",
    "split",
    "upstream_source",
]

InputKind = Literal["source", "repartition"]


class UnsupportedStepError(CadenzaError):
    """A pipeline uses a step the worker cannot run yet; refused at start, never silently skipped."""


@dataclass(frozen=True)
class SubTopology:
    """The steps of one pipeline that run on the records of one input topic.

    ``entry`` is the step records enter through: the ``source`` step for a source topic, or the
    ``key_by`` step whose repartition topic is read (the key_by itself runs upstream). ``nodes`` are
    the steps run here in topological order (for a source sub-topology, starting with the source).
    ``needs_event_time`` says whether event time must be computed: a window or join runs here or
    downstream of one of this sub-topology's repartition topics. A join belongs to the sub-topologies
    of both of its inputs (and so do the steps after it), which share its one operator.
    """

    pipeline: str
    input_topic: str
    input_kind: InputKind
    entry: str
    nodes: tuple[str, ...]
    sink_topics: tuple[str, ...]
    repartition_topics: tuple[str, ...]
    stateful: tuple[str, ...]
    needs_event_time: bool

    @property
    def label(self) -> str:
        return f"{self.pipeline}[{self.input_topic}]"


def check_copartitioned(
    graph: PipelineGraph, subtopologies: list[SubTopology], partitions: Mapping[str, int]
) -> None:
    """Raise :class:`UnsupportedStepError` if a join's two input topics differ in partition count.

    Input partition ``p`` of both sides must meet in the join's state partition ``p``, which only
    holds when both inputs (and so the changelog) have the same number of partitions. Call it once
    the topics' partition counts are known (``partitions``: topic -> count).
    """
    for node_id, topics in join_inputs(graph, subtopologies).items():
        inputs = sorted(topics)
        counts = {topic: partitions.get(topic) for topic in inputs}
        if len(set(counts.values())) > 1:
            listed = ", ".join(f"{topic} has {count}" for topic, count in counts.items())
            raise UnsupportedStepError(
                f"pipeline {graph.name!r}, step {node_id!r}: the join's inputs are not co-partitioned "
                f"({listed} partitions); give both sources the same number of partitions"
            )


def join_inputs(graph: PipelineGraph, subtopologies: list[SubTopology]) -> dict[str, frozenset[str]]:
    """Each join step of ``graph`` -> the topics its sub-topologies read (its two sides' inputs)."""
    return {
        node.id: frozenset(sub.input_topic for sub in subtopologies if node.id in sub.nodes)
        for node in graph.nodes
        if node.kind == "join"
    }


def split(graph: PipelineGraph) -> list[SubTopology]:
    """The sub-topologies of ``graph``: one per source, one per key_by, in topological order.

    What a worker cannot run (a key_by, window or join after a join...) never reaches here: the
    graph refuses it when it is declared or validated (see
    :func:`cadenza.pipelines.graph.unsupported_by_worker`).
    """
    order = {node_id: index for index, node_id in enumerate(graph.topological_order())}
    kinds = {node.id: node.kind for node in graph.nodes}
    entries: list[tuple[str, InputKind, str]] = []
    for node in graph.nodes:
        if node.kind == "source":
            entries.append((node.id, "source", str(node.parameters["topic"])))
        elif node.kind == "key_by":
            if node.repartition_topic is None:
                raise UnsupportedStepError(
                    f"pipeline {graph.name!r}, step {node.id!r}: key_by has no repartition topic"
                )
            entries.append((node.id, "repartition", node.repartition_topic))
    members: dict[str, list[str]] = {}
    for entry, kind, _topic in entries:
        start = [entry] if kind == "source" else list(graph.downstream(entry))
        seen: set[str] = set()
        stack = list(start)
        while stack:
            node_id = stack.pop()
            if node_id in seen:
                continue
            seen.add(node_id)
            if kinds[node_id] not in ("key_by", "sink"):
                stack.extend(graph.downstream(node_id))
        members[entry] = sorted(seen, key=order.__getitem__)
    needs: dict[str, bool] = {}

    def needs_event_time(entry: str) -> bool:
        if entry not in needs:
            nodes = members[entry]
            needs[entry] = any(kinds[n] in ("window_aggregate", "join", "process") for n in nodes) or any(
                needs_event_time(n) for n in nodes if kinds[n] == "key_by"
            )
        return needs[entry]

    result: list[SubTopology] = []
    for entry, kind, topic in sorted(entries, key=lambda e: order[e[0]]):
        nodes = members[entry]
        result.append(
            SubTopology(
                pipeline=graph.name,
                input_topic=topic,
                input_kind=kind,
                entry=entry,
                nodes=tuple(nodes),
                sink_topics=tuple(
                    dict.fromkeys(str(graph.node(n).parameters["topic"]) for n in nodes if kinds[n] == "sink")
                ),
                repartition_topics=tuple(
                    t for n in nodes if kinds[n] == "key_by" and (t := graph.node(n).repartition_topic)
                ),
                stateful=tuple(n for n in nodes if graph.node(n).stateful),
                needs_event_time=needs_event_time(entry),
            )
        )
    return result


def upstream_source(graph: PipelineGraph, node_id: str) -> str:
    """The source step ``node_id`` reads from (its first input's, walking up); used for a window's
    ``max_out_of_orderness``, which is declared on the source."""
    current = node_id
    while True:
        node = graph.node(current)
        if node.kind == "source":
            return current
        current = node.upstream[0]


def check_no_cycles_across(graphs: Sequence[PipelineGraph]) -> None:
    """Raise :class:`~cadenza.pipelines.PipelineDefinitionError` if the pipelines of one worker feed
    each other in a cycle, naming the pipelines and topics on it.

    ``compile()`` refuses a pipeline whose sink is its own source, but pipeline ``a`` (topic x -> y)
    and ``b`` (y -> x) are each fine alone and, run together, send every record round forever. Topics
    are the vertices here: a pipeline links source topic ``s`` to sink topic ``t`` when ``t`` is
    reachable from ``s`` inside it (so two unrelated flows of one pipeline make no cycle), and a Spark
    stage links its input topic to its result topic, since ``cadenza spark-stage`` carries records
    across. Dead-letter and late topics link nothing: only failed or late records take them, and a
    pipeline that retries a dead-letter topic into a source is a deliberate pattern, not a loop.
    """
    # topic -> [(topic it feeds, the pipeline doing it, how the message says so)]
    links: dict[str, list[tuple[str, str, str]]] = {}
    for graph in graphs:
        for node in graph.nodes:
            if node.kind == "source":
                source = str(node.parameters["topic"])
                for sink in _sinks_reached(graph, node.id):
                    links.setdefault(source, []).append((sink, graph.name, f"pipeline {graph.name!r}"))
        for stage in graph.spark_stages:
            links.setdefault(stage.input_topic, []).append(
                (stage.output_topic, graph.name, f"Spark stage {stage.id!r} of pipeline {graph.name!r}")
            )
    cycle = _find_topic_cycle(links)
    if cycle is None:
        return
    names = list(dict.fromkeys(pipeline for _, pipeline, _ in cycle))
    who = (
        f"pipeline {names[0]!r} feeds itself"
        if len(names) == 1
        else f"pipelines {', '.join(repr(n) for n in names[:-1])} and {names[-1]!r} feed each other"
    )
    path = " -> ".join(f"topic {topic!r} -> {through}" for topic, _, through in cycle)
    raise PipelineDefinitionError(
        f"{who} in a cycle: {path} -> topic {cycle[0][0]!r}; every record on it would go round "
        "forever. Write one of these sinks to another topic"
    )


def _sinks_reached(graph: PipelineGraph, start: str) -> list[str]:
    """The sink topics records entering at step ``start`` can reach, through repartitions and joins."""
    seen: set[str] = set()
    stack = [start]
    topics: list[str] = []
    while stack:
        current = stack.pop()
        if current in seen:
            continue
        seen.add(current)
        node = graph.node(current)
        if node.kind == "sink":
            topics.append(str(node.parameters["topic"]))
        stack.extend(node.downstream)
    return list(dict.fromkeys(topics))


def _find_topic_cycle(links: Mapping[str, list[tuple[str, str, str]]]) -> list[tuple[str, str, str]] | None:
    """One cycle of ``links`` as (topic, pipeline, label) per topic on it, the label saying what leads
    from that topic to the next; ``None`` if there is none.

    Depth first from each topic in order; a link back to a topic on the current path closes a cycle.
    """
    done: set[str] = set()
    for root in links:
        if root in done:
            continue
        path: list[str] = [root]
        via: list[tuple[str, str]] = []  # via[i] leads from path[i] to path[i + 1]
        on_path = {root: 0}
        pending = [iter(links.get(root, ()))]
        while pending:
            step = next(pending[-1], None)
            if step is None:
                pending.pop()
                finished = path.pop()
                del on_path[finished]
                done.add(finished)
                if via:
                    via.pop()
                continue
            target, pipeline, label = step
            if target in on_path:
                start = on_path[target]
                hops = [*via[start:], (pipeline, label)]
                return [(topic, *hop) for topic, hop in zip(path[start:], hops, strict=True)]
            if target in done:
                continue
            on_path[target] = len(path)
            path.append(target)
            via.append((pipeline, label))
            pending.append(iter(links.get(target, ())))
    return None
