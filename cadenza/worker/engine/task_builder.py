"""Assembling a sub-topology into runnable operators: a
:class:`~cadenza.worker.engine.task.Task` per sub-topology.

Operators are built from the last step back to the first, so each is created with its downstream
already in hand and the run stage is a plain chain of method calls. A join and the steps after it
belong to the sub-topologies of both of its inputs; they are built once per pipeline and shared, each
sub-topology entering the join through the
:class:`~cadenza.worker.engine.operators.join_step.JoinInput` of its
side.

Watermark inputs come from the plan (``partitions``: topic -> partition count): a window or join
reading a source topic has one input, its partition; one reading a repartition topic has every
partition of the topic feeding that repartition topic, each of which holds the watermark back until
it delivers (see ``docs/concepts/watermarks.md``). Such a task enters through a
:class:`~cadenza.worker.engine.operators.progress.ProgressGate`, and the key_by writing its topic sends it
progress records (:meth:`~cadenza.worker.engine.operators.routing.KeyByOp.broadcast_progress`). A key_by
that only stateless steps separate from its task's entry learns its progress there, from every
record run, through a :class:`~cadenza.worker.engine.operators.progress.ProgressTap` (reading a source
topic) or a :class:`~cadenza.worker.engine.operators.progress.FrontierTap` (reading a repartition topic,
where a partition's progress is the minimum over its upstream partitions).

Hooks the worker passes in: ``store_factory`` makes each stateful step's store (memory by default,
see :func:`cadenza.state.store_factory`); ``registry_client`` makes Avro sources read the Confluent
Schema Registry wire format (see :func:`cadenza.worker.engine.decode.make_registry_client`); ``hooks``
(:class:`OperatorHooks`, from the worker's plan assembly in :mod:`cadenza.worker.engine.plan`) gives each
key_by, sink and dead-letter writer its context stamp and metrics when it is constructed, so no
operator is changed after it is built.

How each step kind becomes an operator is registered per kind in
:mod:`cadenza.worker.engine.step_builders`; the :class:`TaskBuilder` here walks the sub-topology and
asks the registry once per step.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import KW_ONLY, dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from cadenza.pipelines import PipelineGraph
from cadenza.pipelines.graph import PASS_THROUGH_KINDS, NodeFunctions
from cadenza.pipelines.parallel import ParallelSpec
from cadenza.pipelines.window_specs import Hopping, Tumbling
from cadenza.schemas import SchemaRegistryLike
from cadenza.state import StateStore, StoreFactory
from cadenza.state import store_factory as make_store_factory
from cadenza.worker.engine.counters import WorkerCounters
from cadenza.worker.engine.dead_letter import DeadLetters
from cadenza.worker.engine.decode import Decoder, RepartitionDecoder, SourceDecoder
from cadenza.worker.engine.operators.base import Operator, chain
from cadenza.worker.engine.operators.join_step import JoinOp
from cadenza.worker.engine.operators.parallel_step import ProgressHold
from cadenza.worker.engine.operators.process_step import ProcessOp
from cadenza.worker.engine.operators.progress import FrontierTap, ProgressGate, ProgressListener, ProgressTap
from cadenza.worker.engine.operators.routing import KeyByOp
from cadenza.worker.engine.operators.stateful import StatefulArgs, StatefulStep
from cadenza.worker.engine.output import Output
from cadenza.worker.engine.task import Task
from cadenza.worker.engine.topology import SubTopology, UnsupportedStepError, upstream_source

if TYPE_CHECKING:
    from cadenza.infra.metrics.prometheus import LatencyHistogram, OperatorMetrics
    from cadenza.worker.engine.idle_clock import IdleClock
    from cadenza.worker.engine.lessees.hub import LesseeHub
    from cadenza.worker.engine.operators.parallel_step import ParallelOp
    from cadenza.worker.engine.operators.routing import KeyByStamp, SinkStamp

__all__ = ["OperatorHooks", "TaskBuilder", "default_stores"]


class OperatorHooks(Protocol):
    """What scheduling and metrics give the operators of a sub-topology, asked as each is built."""

    def dead_letters(self, graph: PipelineGraph) -> Callable[[str], OperatorMetrics] | None:
        """``step id -> its series``, for the dead letters and late records of ``graph``."""
        ...

    def key_by(
        self, graph: PipelineGraph, sub: SubTopology, node_id: str, topic: str
    ) -> tuple[KeyByStamp | None, Callable[[float], float] | None]:
        """The context stamp for ``topic``'s reader and ``event time -> the first window close after
        it`` of the window reading ``topic`` (for early progress), if any."""
        ...

    def close_wait(self, graph: PipelineGraph, node_id: str) -> LatencyHistogram | None:
        """Where a window step's close waits are observed."""
        ...

    def sink(self, graph: PipelineGraph, sub: SubTopology, node_id: str) -> SinkStamp | None:
        """The stamp that records a result's deadline and makes the context it carries on."""
        ...


def _fn(functions: NodeFunctions, graph: PipelineGraph, node_id: str) -> Callable[[Any], Any]:
    if functions.fn is None:
        raise UnsupportedStepError(f"pipeline {graph.name!r}, step {node_id!r}: no function to run")
    return functions.fn


@dataclass(eq=False)
class TaskBuilder:
    """Builds the operators of one sub-topology, last step first."""

    graph: PipelineGraph
    sub: SubTopology
    _: KW_ONLY
    output: Output
    counters: WorkerCounters
    dead: DeadLetters
    idle_timeout: float | None
    #: Steps several sub-topologies run (a join and what follows it), built once: id -> operator.
    shared: dict[str, Operator]
    shared_ids: set[str]
    stores: StoreFactory
    registry_client: SchemaRegistryLike | None
    subtopologies: list[SubTopology]
    partitions: Mapping[str, int] | None
    hooks: OperatorHooks | None
    clock: Callable[[], float]
    wall_clock: Callable[[], float]
    #: Per step kind, the function that builds its operator (:mod:`.step_builders`, given by
    #: :func:`cadenza.worker.engine.tasks.build_tasks`, so that this module needs none of them).
    builders: Mapping[str, Callable[[TaskBuilder, str], Operator]]
    #: Where steps declared with ``parallel=`` get their lessees (``None``: they run as plain steps).
    lessees: LesseeHub | None = None
    #: What a parallel step's releases set the running record's fetch stamp on (the idle clock).
    read_clock: IdleClock | None = None
    # What the build collects for the task.
    built: dict[str, Operator] = field(init=False, default_factory=dict)
    windows: list[StatefulStep] = field(init=False, default_factory=list)
    task_stores: list[StateStore] = field(init=False, default_factory=list)
    keyed: list[KeyByOp] = field(init=False, default_factory=list)
    processors: list[ProcessOp] = field(init=False, default_factory=list)
    parallel: list[ParallelOp] = field(init=False, default_factory=list)
    members: set[str] = field(init=False)
    #: Per source step and output port, its consumers and which of their inputs each port feeds.
    ports: dict[str, dict[int, list[tuple[str, int]]]] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.members = set(self.sub.nodes)
        for edge in self.graph.edges:
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
        tapped = [keyed for keyed in self.keyed if keyed.progress_at_entry]
        listeners: list[ProgressListener] = list(self.windows)
        frontier = None
        if tapped and sub.input_kind == "repartition":
            # A record here says how far its upstream partition got, not its input partition.
            frontier = root = FrontierTap(
                sub.entry,
                root,
                tapped,
                sources=self.sources_of(sub),
                idle_timeout=self.idle_timeout,
                clock=self.clock,
            )
            listeners.append(frontier)
        elif tapped:
            root = ProgressTap(sub.entry, root, tapped)
        if sub.input_kind == "repartition" and sub.needs_event_time:
            hold = ProgressHold(self.parallel) if self.parallel else None
            root = ProgressGate(sub.entry, root, listeners, hold=hold)
        return Task(
            sub,
            decoder,
            root,
            self.windows,
            self.task_stores,
            self.keyed,
            self.processors,
            frontier,
            self.parallel,
        )

    def sources_of(self, sub: SubTopology) -> tuple[int, ...] | None:
        """The watermark inputs of a window or join reading ``sub``'s topic (``None``: not known)."""
        if sub.input_kind == "source":
            return (0,)
        writer = self.writer_of(sub)
        if self.partitions is None or writer is None:
            return None
        count = self.partitions.get(writer.input_topic)
        return None if count is None else tuple(range(count))

    def writer_of(self, sub: SubTopology) -> SubTopology | None:
        """The sub-topology whose key_by writes the repartition topic ``sub`` reads (``None``: none)."""
        return next((w for w in self.subtopologies if sub.input_topic in w.repartition_topics), None)

    def reached_statelessly(self, node_id: str) -> bool:
        """Whether only steps that hand a record's event time on unchanged (``PASS_THROUGH_KINDS``),
        none of them on lessees, lead from this sub-topology's entry to step ``node_id``."""
        graph = self.graph
        node = graph.node(node_id)
        while len(node.upstream) == 1:
            (upstream,) = node.upstream
            if upstream == self.sub.entry:
                return True
            node = graph.node(upstream)
            if node.kind not in PASS_THROUGH_KINDS:
                return False
            if self.lessees is not None and not ParallelSpec.of(node.parameters).inline:
                return False  # a record held at a lessee must not be vouched for ahead of it
        return False

    def join_inputs_here(self, node_id: str) -> list[int]:
        """Which inputs of join ``node_id`` this sub-topology feeds (both, when one stream feeds both)."""
        here = self.members | {self.sub.entry}
        return sorted(
            {edge.input for edge in self.graph.edges if edge.target == node_id and edge.source in here}
        )

    def operator(self, node_id: str) -> Operator:
        """Build step ``node_id`` with the builder its kind registered (see
        :func:`~cadenza.worker.engine.step_builders.register_step`)."""
        kind = self.graph.node(node_id).kind
        build = self.builders.get(kind)
        if build is None:
            raise UnsupportedStepError(
                f"pipeline {self.graph.name!r}, step {node_id!r}: {kind} is not supported by the worker yet"
            )
        return build(self, node_id)

    def fn(self, node_id: str) -> Callable[..., Any]:
        """The user function of step ``node_id`` (a clear error for a graph that lacks it)."""
        return _fn(self.graph.functions.get(node_id, NodeFunctions()), self.graph, node_id)

    def disorder(self, node_id: str) -> float:
        """The bound on out-of-orderness of the source feeding ``node_id``."""
        source = self.graph.node(upstream_source(self.graph, node_id))
        return float(str(source.parameters.get("max_out_of_orderness_s", 0.0)))

    def stateful(self, node_id: str, what: str, disorder: float) -> StatefulArgs:
        """What every stateful step ``node_id`` (``what``, for messages) is built with: its changelog
        topic, downstream, dead letters, counters, a new store, the idle timeout and the clock."""
        topic = self.graph.node(node_id).changelog_topic
        if topic is None:
            raise UnsupportedStepError(
                f"pipeline {self.graph.name!r}, step {node_id!r}: {what} needs a changelog topic"
            )
        return StatefulArgs(
            max_out_of_orderness=disorder,
            changelog_topic=topic,
            next=self.downstream(node_id),
            dead=self.dead,
            counters=self.counters,
            store=self.new_store(node_id),
            idle_timeout=self.idle_timeout,
            clock=self.clock,
            records_progress=self.records_progress(node_id),
        )

    def progress_at_closes(self, topic: str) -> bool:
        """Whether the reader of repartition ``topic`` uses progress only to close one tumbling or
        hopping window, whose closes a key_by knows in advance: then progress that passes no close
        can wait (see :meth:`~cadenza.worker.engine.operators.routing.KeyByOp.broadcast_progress`). Not
        with session or sliding windows (any progress may close one), joins, process steps, or a
        key_by there whose own reader keeps a watermark (it passes the progress on)."""
        readers = [sub for sub in self.subtopologies if sub.input_topic == topic]
        if len(readers) != 1:
            return False
        nodes = [self.graph.node(node_id) for node_id in readers[0].nodes]
        windows = [node for node in nodes if node.kind == "window_aggregate"]
        if len(windows) != 1 or any(node.kind in ("join", "process") for node in nodes):
            return False
        timed = {sub.input_topic for sub in self.subtopologies if sub.needs_event_time}
        if any(node.kind == "key_by" and node.repartition_topic in timed for node in nodes):
            return False
        return isinstance(windows[0].window_spec(), Tumbling | Hopping)

    def records_progress(self, node_id: str) -> bool:
        """Whether the records reaching stateful step ``node_id`` say how far their watermark inputs
        got: not where each of its inputs is a repartition topic written by a key_by that itself reads
        a repartition topic (see :class:`~cadenza.worker.engine.operators.progress.FrontierTap`); there the
        progress records alone do. A join with a source side keeps learning from records (that side
        has no progress records)."""
        readers = [sub for sub in self.subtopologies if node_id in sub.nodes]
        if not readers or any(sub.input_kind != "repartition" for sub in readers):
            return True
        writers = [self.writer_of(sub) for sub in readers]
        return not any(writer is not None and writer.input_kind == "repartition" for writer in writers)

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


#: Where stateful steps keep state when no store factory is given.
default_stores = make_store_factory("memory")
