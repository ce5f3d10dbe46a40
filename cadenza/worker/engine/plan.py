"""Plan assembly: from the pipelines' sub-topologies to an immutable :class:`WorkerPlan`, in one pass.

Everything an operator needs is known from the graphs before any operator is built: which
sub-topology reads a key_by's repartition topic and whether it is windowed (for the context the
key_by stamps), the latency target and window delay a sink measures results against, and each
step's Prometheus series. So the operators are given all of it by their constructors
(:class:`~cadenza.worker.engine.task_builder.OperatorHooks`), the schedules are made from the same
graph-level facts, and nothing reaches into a built operator afterwards.

The plan is what the rest of the worker reads: the tasks, their schedules (index ``i`` is the
scheduler's key ``(i, partition)``), per input topic the tasks and the (decode, schedule) pairs a
record goes through, the stateful steps a checkpoint changelogs, the key_by steps that send progress
records, and the fan-out (most sub-topologies reading one topic). The policy's cost model gets each
pipeline's DAG of sub-topologies here too.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import InitVar, dataclass, field

from confluent_kafka import Message

from cadenza.infra.metrics.emitter import SpanEmitter
from cadenza.infra.metrics.prometheus import LatencyHistogram, OperatorMetrics, PrometheusExporter
from cadenza.pipelines import PipelineGraph
from cadenza.scheduling.policy import SchedulingPolicy
from cadenza.schemas import SchemaRegistryLike
from cadenza.state import StoreFactory
from cadenza.worker.engine.context_stamps import (
    KeyByStamper,
    SinkStamper,
    TaskSchedule,
    WindowTiming,
    close_function,
)
from cadenza.worker.engine.counters import WorkerCounters
from cadenza.worker.engine.idle_clock import IdleClock
from cadenza.worker.engine.lessees.hub import LesseeHub
from cadenza.worker.engine.operators.routing import KeyByOp, KeyByStamp, SinkStamp
from cadenza.worker.engine.operators.stateful import StatefulStep
from cadenza.worker.engine.operators.window_step import assigner_of
from cadenza.worker.engine.output import Output
from cadenza.worker.engine.task import Task
from cadenza.worker.engine.tasks import build_tasks
from cadenza.worker.engine.topology import SubTopology, upstream_source
from cadenza.worker.engine.unit import Unit

__all__ = ["Decode", "WorkerPlan", "assemble", "window_timing"]

Decode = Callable[[Message, str, int, int], Unit | None]
Stage = tuple[Decode, TaskSchedule]


@dataclass(frozen=True, slots=True)
class WorkerPlan:
    """What a started worker runs; made once by :func:`assemble` and never changed."""

    tasks: tuple[Task, ...]
    #: One per task, in task order; ``schedules[i].index == i``.
    schedules: tuple[TaskSchedule, ...]
    #: Per input topic, the tasks reading it.
    routes: Mapping[str, tuple[Task, ...]]
    #: Per input topic, each reading task's decode method and schedule (the admission path).
    stages: Mapping[str, tuple[Stage, ...]]
    #: The stateful steps whose state follows the input partitions (restored, changelogged, dropped).
    windows: tuple[StatefulStep, ...]
    #: key_by steps that send progress records to their repartition topic.
    keyed: tuple[KeyByOp, ...]
    #: The most sub-topologies reading one topic: a fetched record becomes up to this many units.
    fanout: int
    #: The lessees of the steps declared with ``parallel=``; ``None`` when no step has any.
    lessees: LesseeHub | None = None

    @property
    def input_topics(self) -> list[str]:
        return list(self.routes)


def window_timing(graph: PipelineGraph, sub: SubTopology) -> WindowTiming | None:
    """When the results of ``sub``'s (first) window aggregate are due, from the graph alone."""
    for node_id in sub.nodes:
        node = graph.node(node_id)
        if node.kind != "window_aggregate":
            continue
        spec = node.window_spec()
        if spec is None:
            return None  # refused with a clear message when the operator is built
        source = graph.node(upstream_source(graph, node_id))
        delay = float(str(node.parameters.get("allowed_lateness_s", 0.0))) + float(
            str(source.parameters.get("max_out_of_orderness_s", 0.0))
        )
        return WindowTiming(close_function(assigner_of(spec), delay), delay)
    return None


@dataclass(eq=False)
class _Hooks:
    """Answers the task builder's questions (:class:`~cadenza.worker.engine.task_builder.OperatorHooks`)
    from the graphs, and knows the DAG of sub-topologies the key_by steps make, for the cost model."""

    subtopologies: InitVar[Sequence[tuple[PipelineGraph, list[SubTopology]]]]
    policy: SchedulingPolicy
    exporter: PrometheusExporter
    emitter: SpanEmitter | None
    output: Output
    #: (pipeline, input topic) -> the sub-topology reading it and its window timing.
    readers: dict[tuple[str, str], tuple[SubTopology, WindowTiming | None]] = field(init=False)
    #: pipeline -> sub-topology entry -> the entries downstream of it (the cost model's DAG): a
    #: key_by after a shared join is run by both sub-topologies of the join, so both get its edge.
    edges: dict[str, dict[str, list[str]]] = field(init=False, default_factory=dict)

    def __post_init__(self, subtopologies: Sequence[tuple[PipelineGraph, list[SubTopology]]]) -> None:
        self.readers = {
            (graph.name, sub.input_topic): (sub, window_timing(graph, sub))
            for graph, subs in subtopologies
            for sub in subs
        }
        for graph, subs in subtopologies:
            dag = self.edges.setdefault(graph.name, {})
            for sub in subs:
                downstream = dag.setdefault(sub.entry, [])
                for node_id in sub.nodes:
                    node = graph.node(node_id)
                    reader = self.readers.get((graph.name, node.repartition_topic or ""))
                    if node.kind == "key_by" and reader is not None:
                        downstream.append(reader[0].entry)

    def timing(self, graph: PipelineGraph, sub: SubTopology) -> WindowTiming | None:
        return self.readers[(graph.name, sub.input_topic)][1]

    def dead_letters(self, graph: PipelineGraph) -> Callable[[str], OperatorMetrics] | None:
        return functools.partial(self.exporter.operator, graph.tenant, graph.name)

    def key_by(
        self, graph: PipelineGraph, sub: SubTopology, node_id: str, topic: str
    ) -> tuple[KeyByStamp | None, Callable[[float], float] | None]:
        metrics = self.exporter.operator(graph.tenant, graph.name, node_id)
        self.output.ack_latency[topic] = metrics.produce_ack
        reader = self.readers.get((graph.name, topic))
        if reader is None:
            return None, None
        target, timing = reader
        release = None if timing is None else timing.first_close_after()
        return KeyByStamper(self.policy, graph.name, target.entry, timing), release

    def sink(self, graph: PipelineGraph, sub: SubTopology, node_id: str) -> SinkStamp | None:
        timing = self.timing(graph, sub)
        metrics = self.exporter.operator(graph.tenant, graph.name, node_id, sink=True)
        self.output.ack_latency[str(graph.node(node_id).parameters["topic"])] = metrics.produce_ack
        return SinkStamper(
            latency_target=graph.latency_target_s,
            delay=None if timing is None else timing.delay,
            metrics=metrics,
            emitter=self.emitter,
        )

    def close_wait(self, graph: PipelineGraph, node_id: str) -> LatencyHistogram | None:
        return self.exporter.operator(graph.tenant, graph.name, node_id).window_close_wait


def assemble(
    subtopologies: Sequence[tuple[PipelineGraph, list[SubTopology]]],
    *,
    output: Output,
    counters: WorkerCounters,
    policy: SchedulingPolicy,
    exporter: PrometheusExporter,
    emitter: SpanEmitter | None,
    partitions: Mapping[str, int],
    idle_timeout: float | None,
    store_factory: StoreFactory,
    registry_client: SchemaRegistryLike | None,
    clock: Callable[[], float] = time.monotonic,
    wall_clock: Callable[[], float] = time.time,
    lessees: LesseeHub | None = None,
    read_clock: IdleClock | None = None,
) -> WorkerPlan:
    """Build every pipeline's tasks with their hooks, their schedules, and the routing tables."""
    hooks = _Hooks(subtopologies, policy, exporter, emitter, output)
    owned: list[tuple[PipelineGraph, Task]] = []
    for graph, subs in subtopologies:
        tasks = build_tasks(
            graph,
            output,
            counters,
            subs,
            idle_timeout=idle_timeout,
            store_factory=store_factory,
            registry_client=registry_client,
            partitions=partitions,
            hooks=hooks,
            clock=clock,
            wall_clock=wall_clock,
            lessees=lessees,
            read_clock=read_clock,
        )
        owned.extend((graph, task) for task in tasks)
    schedules = tuple(
        TaskSchedule(
            index,
            task,
            graph,
            policy,
            exporter.operator(graph.tenant, graph.name, task.subtopology.entry),
            window=hooks.timing(graph, task.subtopology),
        )
        for index, (graph, task) in enumerate(owned)
    )
    cost_model = policy.cost_model
    if cost_model is not None:
        for pipeline, dag in hooks.edges.items():
            cost_model.add_pipeline(pipeline, dag)
    routes: dict[str, list[Task]] = {}
    stages: dict[str, list[Stage]] = {}
    windows: list[StatefulStep] = []
    for schedule in schedules:
        task = schedule.task
        topic = task.subtopology.input_topic
        routes.setdefault(topic, []).append(task)
        stages.setdefault(topic, []).append((task.decoder.decode, schedule))
        windows.extend(task.windows)
    return WorkerPlan(
        tasks=tuple(task for _, task in owned),
        schedules=schedules,
        routes={topic: tuple(tasks) for topic, tasks in routes.items()},
        stages={topic: tuple(pairs) for topic, pairs in stages.items()},
        windows=tuple(windows),
        keyed=tuple(keyed for _, task in owned for keyed in task.keyed),
        fanout=max((len(pairs) for pairs in stages.values()), default=1),
        lessees=lessees if lessees is not None and lessees.steps else None,
    )
