"""Assembling a sub-topology into runnable operators: a :class:`Task` per sub-topology.

Operators are built from the last step back to the first, so each is created with its downstream
already in hand and the run stage is a plain chain of method calls.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Message

from cadenza.pipelines import PipelineGraph
from cadenza.pipelines.graph import NodeFunctions, TopicFormat
from cadenza.state.safe_codec import register_function_models, register_model
from cadenza.worker.counters import WorkerCounters
from cadenza.worker.dead_letter import DeadLetters
from cadenza.worker.decode import Decoder, RepartitionDecoder, SourceDecoder
from cadenza.worker.operators.base import Operator, chain
from cadenza.worker.operators.routing import KeyByOp, SinkOp
from cadenza.worker.operators.stateless import BranchOp, FilterOp, FlatMapOp, MapOp
from cadenza.worker.operators.window import WindowOp
from cadenza.worker.output import Output
from cadenza.worker.topology import SubTopology, UnsupportedStepError, split, upstream_source
from cadenza.worker.unit import Unit

__all__ = ["Task", "build_tasks"]


@dataclass
class Task:
    """A runnable sub-topology: decode records of ``subtopology.input_topic``, then run them."""

    subtopology: SubTopology
    decoder: Decoder
    root: Operator
    windows: list[WindowOp] = field(default_factory=list)

    def decode(self, message: Message, topic: str, partition: int, offset: int) -> Unit | None:
        return self.decoder.decode(message, topic, partition, offset)

    def run(self, unit: Unit) -> None:
        self.root.process(unit, unit.key, unit.value, unit.event_time, None)


def _fn(functions: NodeFunctions, graph: PipelineGraph, node_id: str) -> Callable[[Any], Any]:
    if functions.fn is None:
        raise UnsupportedStepError(f"pipeline {graph.name!r}, step {node_id!r}: no function to run")
    return functions.fn


class _Builder:
    """Builds the operators of one sub-topology, last step first."""

    def __init__(
        self,
        graph: PipelineGraph,
        sub: SubTopology,
        *,
        output: Output,
        counters: WorkerCounters,
        dead: DeadLetters,
        idle_timeout: float | None,
    ) -> None:
        self.graph = graph
        self.sub = sub
        self.output = output
        self.counters = counters
        self.dead = dead
        self.idle_timeout = idle_timeout
        self.members = set(sub.nodes)
        self.built: dict[str, Operator] = {}
        self.windows: list[WindowOp] = []
        self.ports: dict[str, dict[int, list[str]]] = {}
        for edge in graph.edges:
            self.ports.setdefault(edge.source, {}).setdefault(edge.port, []).append(edge.target)

    def downstream(self, node_id: str, port: int = 0) -> Operator:
        """What ``node_id`` emits to on ``port``: its consumers in this sub-topology, already built."""
        targets = [t for t in self.ports.get(node_id, {}).get(port, []) if t in self.members]
        return chain(node_id, [self.built[t] for t in targets])

    def task(self) -> Task:
        graph, sub = self.graph, self.sub
        for node_id in reversed(sub.nodes):
            if graph.node(node_id).kind != "source":
                self.built[node_id] = self.operator(node_id)
        decoder: Decoder
        if sub.input_kind == "source":
            functions = graph.functions.get(sub.entry, NodeFunctions())
            decoder = SourceDecoder(
                graph.name, graph.node(sub.entry), functions, self.dead, needs_event_time=sub.needs_event_time
            )
        else:
            decoder = RepartitionDecoder(
                graph.name, sub.entry, self.dead, needs_event_time=sub.needs_event_time
            )
        self.windows.reverse()
        return Task(sub, decoder, self.downstream(sub.entry), self.windows)

    def operator(self, node_id: str) -> Operator:
        graph, dead, counters = self.graph, self.dead, self.counters
        node = graph.node(node_id)
        functions = graph.functions.get(node_id, NodeFunctions())
        kind = node.kind
        if kind == "sink":
            return self.sink(node_id)
        if kind == "map":
            return MapOp(node_id, _fn(functions, graph, node_id), self.downstream(node_id), dead)
        if kind == "filter":
            return FilterOp(node_id, _fn(functions, graph, node_id), self.downstream(node_id), dead)
        if kind == "flat_map":
            return FlatMapOp(node_id, _fn(functions, graph, node_id), self.downstream(node_id), dead)
        if kind == "key_by" and node.repartition_topic is not None:
            return KeyByOp(
                node_id,
                _fn(functions, graph, node_id),
                node.repartition_topic,
                output=self.output,
                dead=dead,
                counters=counters,
            )
        if kind == "branch":
            ports = tuple(self.downstream(node_id, port) for port in range(len(functions.predicates)))
            return BranchOp(node_id, functions.predicates, ports, dead)
        if kind == "window_aggregate":
            return self.window(node_id)
        raise UnsupportedStepError(
            f"pipeline {graph.name!r}, step {node_id!r}: {kind} is not supported by the worker yet"
        )

    def sink(self, node_id: str) -> SinkOp:
        node = self.graph.node(node_id)
        fmt: TopicFormat = "avro" if node.parameters.get("format") == "avro" else "json"
        if fmt == "avro" and self.after_window(node_id):
            raise UnsupportedStepError(
                f"pipeline {self.graph.name!r}, step {node_id!r}: an Avro sink after a window aggregate "
                "is not supported yet (window results are written as JSON); use format='json'"
            )
        topic = str(node.parameters["topic"])
        return SinkOp(node_id, topic, fmt, output=self.output, dead=self.dead, counters=self.counters)

    def window(self, node_id: str) -> WindowOp:
        graph = self.graph
        node = graph.node(node_id)
        spec = node.window_spec()
        if spec is None or node.changelog_topic is None:
            raise UnsupportedStepError(
                f"pipeline {graph.name!r}, step {node_id!r}: a window aggregate needs a window spec and "
                "a changelog topic"
            )
        source = graph.node(upstream_source(graph, node_id))
        window = WindowOp(
            node_id,
            spec,
            graph.functions.get(node_id, NodeFunctions()),
            allowed_lateness=float(str(node.parameters.get("allowed_lateness_s", 0.0))),
            max_out_of_orderness=float(str(source.parameters.get("max_out_of_orderness_s", 0.0))),
            changelog_topic=node.changelog_topic,
            next=self.downstream(node_id),
            dead=self.dead,
            counters=self.counters,
            idle_timeout=self.idle_timeout,
        )
        self.windows.append(window)
        return window

    def after_window(self, node_id: str) -> bool:
        """Whether a window aggregate of this sub-topology is upstream of ``node_id``."""
        stack = list(self.graph.upstream(node_id))
        while stack:
            current = stack.pop()
            if current not in self.members:
                continue
            if self.graph.node(current).kind == "window_aggregate":
                return True
            stack.extend(self.graph.upstream(current))
        return False


def build_tasks(
    graph: PipelineGraph,
    output: Output,
    counters: WorkerCounters,
    subtopologies: list[SubTopology] | None = None,
    *,
    idle_timeout: float | None = None,
) -> list[Task]:
    """One task per sub-topology of ``graph`` (see :func:`cadenza.worker.topology.split`)."""
    subtopologies = split(graph) if subtopologies is None else subtopologies
    for functions in graph.functions.values():  # the models repartition and changelog bytes may name
        register_model(functions.value_model)
        register_model(functions.key_model)
        for fn in (functions.fn, functions.init, functions.add, functions.merge, functions.result):
            register_function_models(fn)
    dead = DeadLetters(graph.dead_letter_topic, graph.late_topic, output, counters)
    return [
        _Builder(graph, sub, output=output, counters=counters, dead=dead, idle_timeout=idle_timeout).task()
        for sub in subtopologies
    ]
