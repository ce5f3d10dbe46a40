"""How each step kind becomes a runtime operator: a registry of builders, one per kind.

:class:`~cadenza.worker.engine.task_builder.TaskBuilder` walks a sub-topology last step first and asks
this registry once per step, never per record: at run time the operators are a plain chain of calls,
so the registry costs nothing per record. Every built-in kind registers here; a kind with no builder
is refused when tasks are built (:class:`~cadenza.worker.engine.topology.UnsupportedStepError`), not
when its first record arrives. Each builder gets the task builder, which knows the graph, the
sub-topology, what is already built downstream and what the worker passed in (output, dead letters,
stores, hooks, clocks).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeAlias

from cadenza.operators import Lift
from cadenza.pipelines.graph import NodeFunctions, TopicFormat
from cadenza.pipelines.parallel import ParallelSpec
from cadenza.worker.engine.operators.base import Operator
from cadenza.worker.engine.operators.join_step import JoinOp
from cadenza.worker.engine.operators.parallel_step import ParallelOp
from cadenza.worker.engine.operators.process_step import ProcessOp
from cadenza.worker.engine.operators.routing import KeyByOp, SinkOp
from cadenza.worker.engine.operators.stateless import BranchOp, FilterOp, FlatMapOp, MapOp
from cadenza.worker.engine.operators.window_step import LiftedWindowOp, WindowOp
from cadenza.worker.engine.topology import UnsupportedStepError

if TYPE_CHECKING:
    from cadenza.worker.engine.task_builder import TaskBuilder

__all__ = ["STEP_BUILDERS", "StepBuilder", "register_step"]

StepBuilder: TypeAlias = Callable[["TaskBuilder", str], Operator]
"""Builds the runtime operator of one step (by id) of the builder's sub-topology, its downstream built."""

STEP_BUILDERS: dict[str, StepBuilder] = {}
"""Step kind -> its builder. Consulted once per step when tasks are built, never per record: the
operators are then a plain chain of calls."""


def register_step(kind: str) -> Callable[[StepBuilder], StepBuilder]:
    """Register the builder of step ``kind``; every built-in kind registers below."""

    def register(build: StepBuilder) -> StepBuilder:
        if kind in STEP_BUILDERS:
            raise ValueError(f"step kind {kind!r} already has a builder")
        STEP_BUILDERS[kind] = build
        return build

    return register


def _parallel(b: TaskBuilder, node_id: str, kind: str) -> Operator | None:
    """The step on lessees, if it is declared with ``parallel=`` and the engine has lessees."""
    spec = ParallelSpec.of(b.graph.node(node_id).parameters)
    if spec.inline or b.lessees is None:
        return None
    step = ParallelOp(
        node_id,
        kind,
        b.fn(node_id),
        b.downstream(node_id),
        b.dead,
        hub=b.lessees,
        spec=spec,
        tenant=b.graph.tenant,
        pipeline=b.graph.name,
        read_clock=b.read_clock,
    )
    b.parallel.append(step)
    return step


@register_step("map")
def _map(b: TaskBuilder, node_id: str) -> Operator:
    parallel = _parallel(b, node_id, "map")
    return parallel or MapOp(node_id, b.fn(node_id), b.downstream(node_id), b.dead)


@register_step("filter")
def _filter(b: TaskBuilder, node_id: str) -> Operator:
    parallel = _parallel(b, node_id, "filter")
    return parallel or FilterOp(node_id, b.fn(node_id), b.downstream(node_id), b.dead)


@register_step("flat_map")
def _flat_map(b: TaskBuilder, node_id: str) -> Operator:
    parallel = _parallel(b, node_id, "flat_map")
    return parallel or FlatMapOp(node_id, b.fn(node_id), b.downstream(node_id), b.dead)


@register_step("branch")
def _branch(b: TaskBuilder, node_id: str) -> Operator:
    predicates = b.graph.functions.get(node_id, NodeFunctions()).predicates
    ports = tuple(b.downstream(node_id, port) for port in range(len(predicates)))
    return BranchOp(node_id, predicates, ports, b.dead)


@register_step("key_by")
def _key_by(b: TaskBuilder, node_id: str) -> Operator:
    graph = b.graph
    topic = graph.node(node_id).repartition_topic
    if topic is None:
        raise UnsupportedStepError(
            f"pipeline {graph.name!r}, step {node_id!r}: a key_by needs a repartition topic"
        )
    readers_need = any(s.input_topic == topic and s.needs_event_time for s in b.subtopologies)
    count = b.partitions.get(topic, 0) if b.partitions is not None and readers_need else 0
    stamp, release = (None, None) if b.hooks is None else b.hooks.key_by(graph, b.sub, node_id, topic)
    keyed = KeyByOp(
        node_id,
        b.fn(node_id),
        topic,
        output=b.output,
        dead=b.dead,
        partitions=count,
        stamp=stamp,
        release=release,
        progress_at_entry=bool(count) and b.reached_statelessly(node_id),
        at_closes=b.progress_at_closes(topic),
    )
    if count:
        b.keyed.append(keyed)
    return keyed


@register_step("sink")
def _sink(b: TaskBuilder, node_id: str) -> Operator:
    node = b.graph.node(node_id)
    # An Avro sink never receives window results: PipelineGraph refuses that graph.
    fmt: TopicFormat = "avro" if node.parameters.get("format") == "avro" else "json"
    return SinkOp(
        node_id,
        str(node.parameters["topic"]),
        fmt,
        output=b.output,
        dead=b.dead,
        registry_client=b.registry_client,
        stamp=None if b.hooks is None else b.hooks.sink(b.graph, b.sub, node_id),
        codec=b.graph.functions.get(node_id, NodeFunctions()).codec,
    )


@register_step("window_aggregate")
def _window(b: TaskBuilder, node_id: str) -> Operator:
    graph = b.graph
    node = graph.node(node_id)
    spec = node.window_spec()
    if spec is None:
        raise UnsupportedStepError(
            f"pipeline {graph.name!r}, step {node_id!r}: a window aggregate needs a window spec"
        )
    functions = graph.functions.get(node_id, NodeFunctions())
    parallel = ParallelSpec.of(node.parameters)
    lifted = not parallel.inline and b.lessees is not None
    window = (LiftedWindowOp if lifted else WindowOp)(
        node_id,
        spec,
        functions,
        allowed_lateness=float(str(node.parameters.get("allowed_lateness_s", 0.0))),
        **b.stateful(node_id, "a window aggregate", b.disorder(node_id)),
        inputs=b.sources_of(b.sub),
        close_wait=None if b.hooks is None else b.hooks.close_wait(graph, node_id),
    )
    b.windows.append(window)
    if not lifted or b.lessees is None:
        return window
    if functions.init is None or functions.add is None:
        raise UnsupportedStepError(
            f"pipeline {graph.name!r}, step {node_id!r}: an aggregate needs init and add"
        )
    lift = ParallelOp(
        node_id,
        "lift",
        Lift(functions.init, functions.add),
        window,
        b.dead,
        hub=b.lessees,
        spec=parallel,
        tenant=graph.tenant,
        pipeline=graph.name,
        read_clock=b.read_clock,
    )
    b.parallel.append(lift)
    return lift


@register_step("process")
def _process(b: TaskBuilder, node_id: str) -> Operator:
    step = ProcessOp(
        node_id,
        b.fn(node_id),
        **b.stateful(node_id, "a process step", b.disorder(node_id)),
        wall_clock=b.wall_clock,
        inputs=b.sources_of(b.sub),
    )
    b.windows.append(step)
    b.processors.append(step)
    return step


@register_step("join")
def _join(b: TaskBuilder, node_id: str) -> Operator:
    graph = b.graph
    node = graph.node(node_id)
    if len(node.upstream) != 2:
        raise UnsupportedStepError(f"pipeline {graph.name!r}, step {node_id!r}: a join needs two inputs")
    # Event time of both sides meets in one watermark: allow the larger of their sources' disorder.
    disorder = max(b.disorder(up) for up in node.upstream)
    functions = graph.functions.get(node_id, NodeFunctions())
    how = node.parameters.get("how", "inner")
    return JoinOp(
        node_id,
        within=float(str(node.parameters.get("within_s", 0.0))),
        allowed_lateness=float(str(node.parameters.get("allowed_lateness_s", 0.0))),
        on=functions.on,
        **b.stateful(node_id, "a join", disorder),
        sources=b.join_sources(node_id),
        how="left" if how == "left" else "outer" if how == "outer" else "inner",
        joiner=functions.fn,
    )
