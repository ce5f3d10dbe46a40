"""Assembling a sub-topology into runnable operators: a :class:`Task` per sub-topology.

Operators are built from the last step back to the first, so each is created with its downstream
already in hand and the run stage is a plain chain of method calls. A join and the steps after it
belong to the sub-topologies of both of its inputs; they are built once per pipeline and shared, each
sub-topology entering the join through the :class:`~cadenza.worker.operators.join_step.JoinInput` of its
side.

Watermark inputs come from the plan (``partitions``: topic -> partition count): a window or join
reading a source topic has one input, its partition; one reading a repartition topic has every
partition of the topic feeding that repartition topic, each of which holds the watermark back until
it delivers (see ``docs/watermarks.md``). Such a task enters through a
:class:`~cadenza.worker.operators.progress.ProgressGate`, and the key_by writing its topic sends it
progress records (:meth:`~cadenza.worker.operators.routing.KeyByOp.broadcast_progress`).

Hooks the worker passes in: ``store_factory`` makes each stateful step's store (memory by default,
see :func:`cadenza.state.store_factory`); ``registry_client`` makes Avro sources read the Confluent
Schema Registry wire format (see :func:`cadenza.worker.decode.make_registry_client`); ``hooks``
(:class:`OperatorHooks`, from the worker's plan assembly in :mod:`cadenza.worker.plan`) gives each
key_by, sink and dead-letter writer its context stamp and metrics when it is constructed, so no
operator is changed after it is built.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from confluent_kafka import Message

from cadenza.pipelines import PipelineGraph
from cadenza.pipelines.graph import NodeFunctions, TopicFormat
from cadenza.schemas import SchemaRegistryLike
from cadenza.state import StateStore, StoreFactory
from cadenza.state import store_factory as make_store_factory
from cadenza.state.safe_codec import register_function_models, register_model
from cadenza.worker.counters import WorkerCounters
from cadenza.worker.dead_letter import DeadLetters
from cadenza.worker.decode import Decoder, RepartitionDecoder, SourceDecoder
from cadenza.worker.operators.base import Operator, chain
from cadenza.worker.operators.join_step import JoinOp
from cadenza.worker.operators.progress import ProgressGate
from cadenza.worker.operators.routing import KeyByOp, SinkOp
from cadenza.worker.operators.stateful import StatefulStep
from cadenza.worker.operators.stateless import BranchOp, FilterOp, FlatMapOp, MapOp
from cadenza.worker.operators.window_step import WindowOp
from cadenza.worker.output import Output
from cadenza.worker.topology import SubTopology, UnsupportedStepError, split, upstream_source
from cadenza.worker.unit import Unit

if TYPE_CHECKING:
    from cadenza.infra.metrics.prometheus import LatencyHistogram, OperatorMetrics
    from cadenza.worker.operators.routing import KeyByStamp, SinkStamp

__all__ = ["OperatorHooks", "Task", "build_tasks"]


class OperatorHooks(Protocol):
    """What scheduling and metrics give the operators of a sub-topology, asked as each is built."""

    def dead_letters(self, graph: PipelineGraph) -> Callable[[str], OperatorMetrics] | None:
        """``step id -> its series``, for the dead letters and late records of ``graph``."""
        ...

    def key_by(
        self, graph: PipelineGraph, sub: SubTopology, node_id: str, topic: str
    ) -> tuple[KeyByStamp | None, OperatorMetrics | None, Callable[[float], float] | None]:
        """The context stamp for ``topic``'s reader, the step's series, and ``event time -> the first
        window close after it`` of the window reading ``topic`` (for early progress), if any."""
        ...

    def close_wait(self, graph: PipelineGraph, node_id: str) -> LatencyHistogram | None:
        """Where a window step's close waits are observed."""
        ...

    def sink(self, graph: PipelineGraph, sub: SubTopology, node_id: str) -> SinkStamp | None:
        """The stamp that records a result's deadline and makes the context it carries on."""
        ...


@dataclass
class Task:
    """A runnable sub-topology: decode records of ``subtopology.input_topic``, then run them.

    ``windows`` are the stateful steps whose state follows this task's input partitions (window
    aggregates and join inputs): restored when a partition is assigned, dropped when it goes.
    ``stores`` are the state stores of this task's steps (a shared join's store appears in both of
    its tasks); :meth:`close` releases them. ``keyed`` are its key_by steps that send progress
    records downstream: the worker calls their ``broadcast_progress`` every ``progress_interval``.
    """

    subtopology: SubTopology
    decoder: Decoder
    root: Operator
    windows: list[StatefulStep] = field(default_factory=list)
    stores: list[StateStore] = field(default_factory=list)
    keyed: list[KeyByOp] = field(default_factory=list)

    def decode(self, message: Message, topic: str, partition: int, offset: int) -> Unit | None:
        return self.decoder.decode(message, topic, partition, offset)

    def run(self, unit: Unit) -> None:
        self.root.process(unit, unit.key, unit.value, unit.event_time, None)

    def close(self) -> None:
        """Release the state stores (files of a RocksDB store); safe to call more than once."""
        for store in self.stores:
            store.close()


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
        shared: dict[str, Operator],
        shared_ids: set[str],
        stores: StoreFactory,
        registry_client: SchemaRegistryLike | None,
        subtopologies: list[SubTopology],
        partitions: Mapping[str, int] | None,
        hooks: OperatorHooks | None,
        clock: Callable[[], float],
    ) -> None:
        self.hooks = hooks
        self.clock = clock
        self.graph = graph
        self.sub = sub
        self.subtopologies = subtopologies
        self.partitions = partitions
        self.output = output
        self.counters = counters
        self.dead = dead
        self.idle_timeout = idle_timeout
        self.shared = shared
        self.shared_ids = shared_ids
        self.stores = stores
        self.registry_client = registry_client
        self.members = set(sub.nodes)
        self.built: dict[str, Operator] = {}
        self.windows: list[StatefulStep] = []
        self.task_stores: list[StateStore] = []
        self.keyed: list[KeyByOp] = []
        #: Per source step and output port, its consumers and which of their inputs each port feeds.
        self.ports: dict[str, dict[int, list[tuple[str, int]]]] = {}
        for edge in graph.edges:
            self.ports.setdefault(edge.source, {}).setdefault(edge.port, []).append((edge.target, edge.input))

    def downstream(self, node_id: str, port: int = 0) -> Operator:
        """What ``node_id`` emits to on ``port``: its consumers in this sub-topology, already built
        (for a join, the input the edge feeds)."""
        outs: list[Operator] = []
        for target, index in self.ports.get(node_id, {}).get(port, []):
            if target not in self.members:
                continue
            built = self.built[target]
            outs.append(built.inputs[index] if isinstance(built, JoinOp) else built)
        return chain(node_id, outs)

    def task(self) -> Task:
        graph, sub = self.graph, self.sub
        for node_id in reversed(sub.nodes):
            if graph.node(node_id).kind == "source":
                continue
            existing = self.shared.get(node_id)
            if existing is None:
                existing = self.operator(node_id)
                if node_id in self.shared_ids:
                    self.shared[node_id] = existing
            elif isinstance(existing, JoinOp):
                self.task_stores.append(existing.store)
            self.built[node_id] = existing
            if isinstance(existing, JoinOp):
                self.windows.extend(existing.inputs[index] for index in self.join_inputs_here(node_id))
        decoder: Decoder
        if sub.input_kind == "source":
            functions = graph.functions.get(sub.entry, NodeFunctions())
            decoder = SourceDecoder(
                graph.name,
                graph.node(sub.entry),
                functions,
                self.dead,
                needs_event_time=sub.needs_event_time,
                registry_client=self.registry_client,
            )
        else:
            decoder = RepartitionDecoder(
                graph.name, sub.entry, self.dead, needs_event_time=sub.needs_event_time
            )
        self.windows.reverse()
        root = self.downstream(sub.entry)
        if sub.input_kind == "repartition" and sub.needs_event_time:
            root = ProgressGate(sub.entry, root, self.windows)
        return Task(sub, decoder, root, self.windows, self.task_stores, self.keyed)

    def sources_of(self, sub: SubTopology) -> tuple[int, ...] | None:
        """The watermark inputs of a window or join reading ``sub``'s topic (``None``: not known)."""
        if sub.input_kind == "source":
            return (0,)
        if self.partitions is None:
            return None
        for writer in self.subtopologies:
            if sub.input_topic in writer.repartition_topics:
                count = self.partitions.get(writer.input_topic)
                return None if count is None else tuple(range(count))
        return None

    def join_inputs_here(self, node_id: str) -> list[int]:
        """Which inputs of join ``node_id`` this sub-topology feeds (both, when one stream feeds both)."""
        here = self.members | {self.sub.entry}
        return sorted(
            {edge.input for edge in self.graph.edges if edge.target == node_id and edge.source in here}
        )

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
            topic = node.repartition_topic
            readers_need = any(s.input_topic == topic and s.needs_event_time for s in self.subtopologies)
            count = self.partitions.get(topic, 0) if self.partitions is not None and readers_need else 0
            stamp, metrics, release = (
                (None, None, None)
                if self.hooks is None
                else self.hooks.key_by(graph, self.sub, node_id, topic)
            )
            keyed = KeyByOp(
                node_id,
                _fn(functions, graph, node_id),
                topic,
                output=self.output,
                dead=dead,
                counters=counters,
                partitions=count,
                stamp=stamp,
                metrics=metrics,
                release=release,
            )
            if count:
                self.keyed.append(keyed)
            return keyed
        if kind == "branch":
            ports = tuple(self.downstream(node_id, port) for port in range(len(functions.predicates)))
            return BranchOp(node_id, functions.predicates, ports, dead)
        if kind == "window_aggregate":
            return self.window(node_id)
        if kind == "join":
            return self.join(node_id)
        raise UnsupportedStepError(
            f"pipeline {graph.name!r}, step {node_id!r}: {kind} is not supported by the worker yet"
        )

    def sink(self, node_id: str) -> SinkOp:
        node = self.graph.node(node_id)
        # An Avro sink never receives window results: PipelineGraph refuses that graph.
        fmt: TopicFormat = "avro" if node.parameters.get("format") == "avro" else "json"
        topic = str(node.parameters["topic"])
        return SinkOp(
            node_id,
            topic,
            fmt,
            output=self.output,
            dead=self.dead,
            counters=self.counters,
            registry_client=self.registry_client,
            stamp=None if self.hooks is None else self.hooks.sink(self.graph, self.sub, node_id),
            codec=self.graph.functions.get(node_id, NodeFunctions()).codec,
        )

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
        store = self.new_store(node_id)
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
            store=store,
            idle_timeout=self.idle_timeout,
            clock=self.clock,
            inputs=self.sources_of(self.sub),
            close_wait=None if self.hooks is None else self.hooks.close_wait(graph, node_id),
        )
        self.windows.append(window)
        return window

    def join(self, node_id: str) -> JoinOp:
        graph = self.graph
        node = graph.node(node_id)
        if node.changelog_topic is None or len(node.upstream) != 2:
            raise UnsupportedStepError(
                f"pipeline {graph.name!r}, step {node_id!r}: a join needs two inputs and a changelog topic"
            )
        # Event time of both sides meets in one watermark: allow the larger of their sources' disorder.
        disorder = max(
            float(str(graph.node(upstream_source(graph, up)).parameters.get("max_out_of_orderness_s", 0.0)))
            for up in node.upstream
        )
        functions = graph.functions.get(node_id, NodeFunctions())
        how = node.parameters.get("how", "inner")
        return JoinOp(
            node_id,
            within=float(str(node.parameters.get("within_s", 0.0))),
            allowed_lateness=float(str(node.parameters.get("allowed_lateness_s", 0.0))),
            on=functions.on,
            max_out_of_orderness=disorder,
            changelog_topic=node.changelog_topic,
            next=self.downstream(node_id),
            dead=self.dead,
            counters=self.counters,
            store=self.new_store(node_id),
            idle_timeout=self.idle_timeout,
            clock=self.clock,
            sources=self.join_sources(node_id),
            how="left" if how == "left" else "outer" if how == "outer" else "inner",
            joiner=functions.fn,
        )

    def join_sources(self, node_id: str) -> dict[int, tuple[int, ...]]:
        """Per input (side) of join ``node_id``, its watermark inputs, where the plan knows them."""
        sources: dict[int, tuple[int, ...]] = {}
        for sub in self.subtopologies:
            if node_id not in sub.nodes:
                continue
            here = set(sub.nodes) | {sub.entry}
            known = self.sources_of(sub)
            for edge in self.graph.edges:
                if edge.target == node_id and edge.source in here and known is not None:
                    sources[edge.input] = known
        return sources

    def new_store(self, node_id: str) -> StateStore:
        store = self.stores(f"{self.graph.name}/{node_id}")
        self.task_stores.append(store)
        return store


def build_tasks(
    graph: PipelineGraph,
    output: Output,
    counters: WorkerCounters,
    subtopologies: list[SubTopology] | None = None,
    *,
    idle_timeout: float | None = None,
    store_factory: StoreFactory | None = None,
    registry_client: SchemaRegistryLike | None = None,
    partitions: Mapping[str, int] | None = None,
    hooks: OperatorHooks | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> list[Task]:
    """One task per sub-topology of ``graph`` (see :func:`cadenza.worker.topology.split`).

    ``store_factory``: where stateful steps keep state (in memory when not given).
    ``registry_client``: Avro sources then read the Schema Registry wire format (subject
    ``<topic>-value``). ``partitions``: topic -> partition count, from which windows and joins know
    all their watermark inputs up front (without it they learn them from the records). ``hooks``:
    contexts and metrics for the steps that write (none: they stamp and count nothing). ``clock``:
    what watermark idle timeouts are measured on (a test driver passes its virtual clock).
    """
    subtopologies = split(graph) if subtopologies is None else subtopologies
    for functions in graph.functions.values():  # the models repartition and changelog bytes may name
        register_model(functions.value_model)
        register_model(functions.key_model)
        for fn in (functions.fn, functions.init, functions.add, functions.merge, functions.result):
            register_function_models(fn)
    dead = DeadLetters(
        graph.dead_letter_topic,
        graph.late_topic,
        output,
        counters,
        pipeline=graph.name,
        stop_on_error=graph.on_error == "stop",
        metrics=None if hooks is None else hooks.dead_letters(graph),
    )
    stores = store_factory if store_factory is not None else _default_stores
    appearances: dict[str, int] = {}
    for sub in subtopologies:
        for node_id in sub.nodes:
            appearances[node_id] = appearances.get(node_id, 0) + 1
    shared_ids = {node_id for node_id, count in appearances.items() if count > 1}
    shared: dict[str, Operator] = {}
    return [
        _Builder(
            graph,
            sub,
            output=output,
            counters=counters,
            dead=dead,
            idle_timeout=idle_timeout,
            shared=shared,
            shared_ids=shared_ids,
            stores=stores,
            registry_client=registry_client,
            subtopologies=subtopologies,
            partitions=partitions,
            hooks=hooks,
            clock=clock,
        ).task()
        for sub in subtopologies
    ]


_default_stores = make_store_factory("memory")
