"""The run stage in isolation: quanta by priority, measured, counted down for the checkpoint, held
back by producer backpressure, and a stopping pipeline reported (no broker: the producer is made but
never reaches one, and no flush is asked for)."""

from __future__ import annotations

import json
import time

from confluent_kafka import TIMESTAMP_CREATE_TIME, Message

from cadenza.pipelines import Pipeline, PipelineGraph
from cadenza.scheduling.costs import CostModel
from cadenza.scheduling.scheduler import Scheduler
from cadenza.worker.engine.dead_letter import PipelineStoppedError
from cadenza.worker.engine.executor import Executor, SchedKey
from cadenza.worker.engine.inflight import Pending
from cadenza.worker.engine.plan import WorkerPlan
from cadenza.worker.engine.unit import Unit
from tests.worker.engine.test_plan import Click, plan_of


class Pushback:
    """The producer's backpressure signal, set by the test."""

    def __init__(self) -> None:
        self.pressure = False


def graph(name: str, *, fail_on: str | None = None) -> PipelineGraph:
    def enrich(click: Click) -> str:
        if click.user == fail_on:
            raise ValueError(f"cannot enrich {click.user}")
        return click.user.upper()

    p = Pipeline(name, tenant=name, latency_target="1s", on_error="stop" if fail_on else "dead_letter")
    p.source(f"{name}-in", value=Click).map(enrich).sink(f"{name}-out")
    return p.compile()


def admit(
    plan: WorkerPlan, scheduler: Scheduler[SchedKey, Unit], topic: str, users: list[str]
) -> list[Pending]:
    """What the worker's admission does, for records of ``users`` on partition 0 of ``topic``."""
    now = time.time()
    pendings: list[Pending] = []
    for offset, user in enumerate(users):
        value = json.dumps({"user": user, "page": "/", "ts": now}).encode()
        message = Message(
            topic=topic,
            partition=0,
            offset=offset,
            value=value,
            timestamp=(TIMESTAMP_CREATE_TIME, int(now * 1000)),
        )
        pending: Pending = [offset, 0]
        for decode, schedule in plan.stages[topic]:
            unit = decode(message, topic, 0, offset)
            assert unit is not None
            ctx = schedule.context(unit, message, now)
            unit.ctx, unit.pending, unit.enqueued = ctx, pending, time.perf_counter()
            pending[1] += 1
            scheduler.enqueue(schedule.key(0), ctx, unit)
        pendings.append(pending)
    return pendings


def executor_for(
    *graphs: PipelineGraph, quantum: int = 4
) -> tuple[Executor, WorkerPlan, list[PipelineStoppedError]]:
    plan, policy = plan_of(*graphs, policy="fifo")
    scheduler: Scheduler[SchedKey, Unit] = Scheduler(policy, max_records=quantum, max_seconds=None)
    stopped: list[PipelineStoppedError] = []
    executor = Executor(scheduler, policy, plan.schedules, stopped.append)
    return executor, plan, stopped


def test_every_queued_record_runs_is_counted_down_and_measured() -> None:
    executor, plan, _ = executor_for(graph("a"))
    pendings = admit(plan, executor.scheduler, "a-in", [f"u{i}" for i in range(10)])
    assert executor.run_for(60.0) == 10
    assert len(executor.scheduler) == 0
    assert [p[1] for p in pendings] == [0] * 10  # the checkpoint may now commit past every record
    (schedule,) = plan.schedules
    assert schedule.metrics.processed == 10
    model = getattr(executor.policy, "cost_model", None)
    assert isinstance(model, CostModel)
    assert model.estimate("a", schedule.operator_id) != model.default_cost  # the replies reached it


def test_the_time_budget_ends_the_run_after_the_quantum_in_progress() -> None:
    executor, plan, _ = executor_for(graph("a"), quantum=4)
    admit(plan, executor.scheduler, "a-in", [f"u{i}" for i in range(10)])
    assert executor.run_for(0.0) == 4  # one quantum, then the fetcher gets its turn
    assert len(executor.scheduler) == 6


def test_no_quantum_starts_while_the_producer_pushes_back() -> None:
    executor, plan, _ = executor_for(graph("a"))
    pushback = Pushback()
    executor.output = pushback
    admit(plan, executor.scheduler, "a-in", ["u1", "u2"])
    pushback.pressure = True
    assert executor.run_for(60.0) == 0
    assert len(executor.scheduler) == 2
    pushback.pressure = False
    assert executor.run_for(60.0) == 2


def test_a_stopping_pipeline_is_reported_and_the_others_keep_running() -> None:
    executor, plan, stopped = executor_for(graph("a", fail_on="bad"), graph("b"), quantum=1)
    admit(plan, executor.scheduler, "a-in", ["ok", "bad", "later"])
    admit(plan, executor.scheduler, "b-in", ["x", "y"])
    ran = executor.run_for(60.0)
    assert [s.pipeline for s in stopped] == ["a"]
    assert stopped[0].offset == 1
    assert ran == 4  # a's "ok" and "later" (the worker drops a's queue when told), b's two


def test_a_quantum_cut_short_by_a_stopping_step_still_counts_and_times_what_ran_before_it() -> None:
    """Counts and histogram sums are added per quantum: a failure halfway must not lose them."""
    executor, plan, stopped = executor_for(graph("a", fail_on="bad"), quantum=4)
    admit(plan, executor.scheduler, "a-in", ["ok", "fine", "bad", "later"])
    executor.run_for(60.0)
    assert [s.offset for s in stopped] == [2]
    (schedule,) = plan.schedules
    metrics = schedule.metrics
    # "ok" and "fine" ran before the failure, "later" in the next quantum; "bad" never completed.
    assert metrics.processed == 3
    assert metrics.queue_wait.count == metrics.run_time.count == 3
    assert metrics.queue_wait.sum > 0.0 and metrics.run_time.sum > 0.0


def test_after_each_quantum_the_worker_gets_a_word_in_before_the_next_one_starts() -> None:
    """The hook the worker sends urgent progress records from: after a quantum's records ran (and
    produced), before the rest of the run slice."""
    executor, plan, _ = executor_for(graph("a"), quantum=4)
    admit(plan, executor.scheduler, "a-in", [f"u{i}" for i in range(10)])
    (schedule,) = plan.schedules
    seen: list[int] = []
    executor.after_quantum = lambda: seen.append(schedule.metrics.processed)
    assert executor.run_for(60.0) == 10
    assert seen == [4, 8, 10]
