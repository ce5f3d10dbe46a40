"""Plan assembly in isolation: one pass from pipelines to an immutable plan, with every operator
given its context stamp and metrics by its constructor (no broker: the producer is made but never
used, and nothing is run)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from cadenza.infra.broker.embedded import free_port
from cadenza.infra.metrics.prometheus import PrometheusExporter
from cadenza.pipelines import Hopping, Pipeline, PipelineGraph, Tumbling
from cadenza.scheduling.costs import CostModel
from cadenza.scheduling.policy import SchedulingPolicy
from cadenza.scheduling.registry import get_policy
from cadenza.settings import KafkaSettings
from cadenza.state.factory import store_factory
from cadenza.worker.engine.context_stamps import (
    KeyByStamper,
    SinkStamper,
    WindowRelease,
    close_function,
    window_delay,
)
from cadenza.worker.engine.counters import WorkerCounters
from cadenza.worker.engine.operators.routing import KeyByOp, SinkOp
from cadenza.worker.engine.operators.window_step import WindowOp
from cadenza.worker.engine.output import Output
from cadenza.worker.engine.plan import WorkerPlan, assemble, window_timing
from cadenza.worker.engine.topology import SubTopology, split


class Click(BaseModel):
    user: str
    page: str
    ts: float


def windowed(name: str = "windowed", window: Tumbling | Hopping | None = None) -> PipelineGraph:
    p = Pipeline(name, tenant="t", latency_target="2s")
    (
        p.source("clicks", value=Click, timestamp="ts", max_out_of_orderness=0.5)
        .filter(lambda c: True)
        .key_by(lambda c: c.user)
        .window(window or Tumbling("1s"), allowed_lateness="0.25s")
        .count()
        .sink("counts")
    )
    return p.compile()


def stateless(name: str) -> PipelineGraph:
    p = Pipeline(name, tenant="u", latency_target="1s")
    p.source("clicks", value=Click).map(lambda c: c.user).sink(f"{name}-out")
    return p.compile()


def plan_of(*graphs: PipelineGraph, policy: str = "cameo") -> tuple[WorkerPlan, SchedulingPolicy]:
    subtopologies = [(graph, split(graph)) for graph in graphs]
    chosen = get_policy(policy)
    # Nothing listens here: the producer is only constructed (operators hold it), never used.
    output = Output(KafkaSettings(bootstrap_servers=f"127.0.0.1:{free_port()}"), log_level=0)
    partitions = {sub.input_topic: 2 for _, subs in subtopologies for sub in subs}
    plan = assemble(
        subtopologies,
        output=output,
        counters=WorkerCounters(),
        policy=chosen,
        exporter=PrometheusExporter(),
        emitter=None,
        partitions=partitions,
        idle_timeout=None,
        store_factory=store_factory("memory", None),
        registry_client=None,
    )
    return plan, chosen


def operators_of(plan: WorkerPlan, kind: type) -> list[object]:
    """Operators of a kind, found by walking the plan's tasks' chains (for the test only)."""
    found: list[object] = []
    for task in plan.tasks:
        stack: list[object] = [task.root]
        while stack:
            op = stack.pop()
            if isinstance(op, kind) and all(op is not seen for seen in found):
                found.append(op)
            for name in ("next", "downstream", "ports", "outs"):
                value = getattr(op, name, None)
                if isinstance(value, tuple | list):
                    stack.extend(value)
                elif value is not None:
                    stack.append(value)
    return found


def test_the_plan_is_immutable_and_indexes_its_schedules() -> None:
    plan, _ = plan_of(windowed())
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.fanout = 3  # type: ignore[misc]
    assert [schedule.index for schedule in plan.schedules] == list(range(len(plan.tasks)))
    assert [schedule.task for schedule in plan.schedules] == list(plan.tasks)
    assert plan.input_topics == ["clicks", "windowed.3-key_by.repartition"]
    assert plan.fanout == 1
    assert [w.node_id for w in plan.windows] == ["4-count"]


def test_two_pipelines_on_one_topic_share_its_route_and_set_the_fanout() -> None:
    plan, _ = plan_of(stateless("a"), stateless("b"))
    assert [s.pipeline for _, s in plan.stages["clicks"]] == ["a", "b"]
    assert len(plan.routes["clicks"]) == 2
    assert plan.fanout == 2


def test_key_by_and_sink_get_their_stamps_and_metrics_at_construction() -> None:
    plan, _ = plan_of(windowed())
    (keyed,) = operators_of(plan, KeyByOp)
    assert isinstance(keyed, KeyByOp) and plan.keyed == (keyed,)
    assert isinstance(keyed.stamp, KeyByStamper)
    # The reader of the repartition topic: its entry, and windowed.
    reader = split(windowed())[1]
    assert (keyed.stamp.target.pipeline_id, keyed.stamp.target.operator_id) == ("windowed", reader.entry)
    assert keyed.stamp.target.is_windowed and keyed.stamp.release is not None
    assert keyed.metrics is not None and keyed.metrics.labels == ("t", "windowed", "3-key_by")
    (sink,) = operators_of(plan, SinkOp)
    assert isinstance(sink, SinkOp) and isinstance(sink.stamp, SinkStamper)
    assert sink.stamp.latency_target == 2.0
    assert sink.stamp.delay == pytest.approx(0.75)  # allowed lateness + the source's out-of-orderness
    decoder = plan.tasks[0].decoder
    assert decoder.dead.metrics is not None


def test_schedules_know_their_window_from_the_graph() -> None:
    plan, _ = plan_of(windowed())
    source, repartition = plan.schedules
    assert source.window is None and source.release is None
    assert repartition.window is not None and repartition.window.delay == pytest.approx(0.75)
    assert repartition.release is None  # records of a repartition topic had it stamped upstream


def test_the_cost_model_gets_the_dag_of_sub_topologies() -> None:
    plan, policy = plan_of(windowed(), stateless("solo"))
    model = getattr(policy, "cost_model", None)
    assert isinstance(model, CostModel)
    first, second = (schedule.operator_id for schedule in plan.schedules[:2])
    assert model.downstream("windowed", first) == [second]
    assert model.downstream("windowed", second) == []
    assert model.operators("solo") == [plan.schedules[2].operator_id]


def _window_op(plan: WorkerPlan) -> WindowOp:
    (window,) = plan.windows
    assert isinstance(window, WindowOp)
    return window


@given(
    size=st.sampled_from([0.5, 1.0, 3.0]),
    hop=st.sampled_from([None, 0.25, 0.5]),
    times=st.lists(st.floats(0.0, 1000.0, allow_nan=False), min_size=1, max_size=30),
)
def test_window_timing_from_the_graph_matches_the_built_window(
    size: float, hop: float | None, times: list[float]
) -> None:
    """The graph-level timing the plan gives key_by and sinks is the built operator's own."""
    spec = Tumbling(f"{size}s") if hop is None else Hopping(f"{size}s", f"{min(hop, size)}s")
    graph = windowed(window=spec)
    sub: SubTopology = split(graph)[1]
    timing = window_timing(graph, sub)
    assert timing is not None
    plan, _ = plan_of(graph)
    op = _window_op(plan)
    assert timing.delay == window_delay(op)
    brute = close_function(op.assigner, window_delay(op))
    assert [timing.close(t) for t in times] == [brute(t) for t in times]
    ours, theirs = timing.release(), WindowRelease.of(op)
    assert [ours(p % 2, t) for p, t in enumerate(times)] == [theirs(p % 2, t) for p, t in enumerate(times)]


def test_a_sub_topology_without_a_window_has_no_timing() -> None:
    graph = stateless("plain")
    assert window_timing(graph, split(graph)[0]) is None
