"""Splitting a compiled pipeline into sub-topologies at its repartition points, like Kafka Streams.

A ``key_by`` changes which partition a record belongs in, so the records after it cannot run where
the records before it were read. The ``key_by`` therefore ends its sub-topology by writing to its
repartition topic, keyed by the new key, and the steps after it form a new sub-topology that reads
that topic. Within a sub-topology every record stays in the partition it was read from, which is what
lets keyed state and watermarks live per input partition.

Pure logic over :class:`~cadenza.pipelines.PipelineGraph`: no Kafka here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from cadenza.errors import CadenzaError
from cadenza.pipelines import PipelineGraph

__all__ = [
    "SubTopology",
    "UnsupportedStepError",
    "check_copartitioned",
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
    for node in graph.nodes:
        if node.kind != "join":
            continue
        inputs = sorted({sub.input_topic for sub in subtopologies if node.id in sub.nodes})
        counts = {topic: partitions.get(topic) for topic in inputs}
        if len(set(counts.values())) > 1:
            listed = ", ".join(f"{topic} has {count}" for topic, count in counts.items())
            raise UnsupportedStepError(
                f"pipeline {graph.name!r}, step {node.id!r}: the join's inputs are not co-partitioned "
                f"({listed} partitions); give both sources the same number of partitions"
            )


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
            needs[entry] = any(kinds[n] in ("window_aggregate", "join") for n in nodes) or any(
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
