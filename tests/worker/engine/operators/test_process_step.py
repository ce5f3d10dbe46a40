"""The process step through PipelineDriver (no broker): keyed state, timers, forward, errors, restore."""

from __future__ import annotations

import runpy
from pathlib import Path
from typing import Any

import pytest

from cadenza import Processor, ProcessorContext, ProcessorRecord
from cadenza.pipelines import Pipeline, PipelineDefinitionError, PipelineGraph, describe
from cadenza.scheduling.clock import VirtualClock
from cadenza.state import ChangelogReplay
from cadenza.testing import PipelineDriver
from cadenza.worker.engine.operators.process_step import ProcessOp

START = 1_700_000_000.0


def _user(value: dict[str, Any]) -> str:
    return str(value["u"])


def _event_time(value: dict[str, Any]) -> float:
    return float(value["t"])


class RunningTotal(Processor):
    """Per key: a running total forwarded with each record; at the key's first record an event-time
    timer at t + 10 emits the total then, and a wall-clock timer 60 s later emits a heartbeat."""

    def init(self, context: ProcessorContext) -> None:
        self.ctx = context

    def process(self, record: ProcessorRecord) -> None:
        ctx = self.ctx
        if record.value.get("boom"):
            ctx.state = {"total": -1}  # must not stick: the call raises
            raise ValueError("boom")
        state = ctx.state or {"total": 0}
        if ctx.state is None:
            ctx.schedule_event_timer(record.timestamp + 10)
            ctx.schedule_wall_clock_timer(ctx.now() + 60)
        total = state["total"] + record.value["n"]
        ctx.state = {"total": total}
        ctx.forward({"user": ctx.key, "total": total, "trace": record.headers.get("trace")})

    def on_event_timer(self, key: Any, when: float) -> None:
        self.ctx.forward({"user": key, "closing_total": self.ctx.state["total"], "at": when})

    def on_wall_clock_timer(self, key: Any, when: float) -> None:
        self.ctx.forward({"user": key, "heartbeat": when})


def totals(name: str = "totals", factory: Any = RunningTotal, ooo: str = "0s") -> Pipeline:
    pipeline = Pipeline(name, tenant="t", latency_target="1s")
    stream = pipeline.source("events", timestamp=_event_time, max_out_of_orderness=ooo).key_by(_user)
    stream.process(factory).sink("totals-out")
    return pipeline


def step_id(driver: PipelineDriver, pipeline: str = "totals") -> str:
    return next(n.id for n in driver.graphs[pipeline].nodes if n.kind == "process")


def process_op(driver: PipelineDriver) -> ProcessOp:
    return next(step for task in driver.plan.tasks for step in task.processors)


def values(driver: PipelineDriver) -> list[dict[str, Any]]:
    return [r.value for r in driver.outputs("totals-out")]


def test_state_is_per_key_and_forwarded_records_carry_key_headers_and_context() -> None:
    pipeline = Pipeline("totals", tenant="t", latency_target="1s")
    # Keyed by the Kafka key, so process() reads the source record itself (headers included).
    pipeline.source("events", key=str, timestamp=_event_time).process(RunningTotal).sink("totals-out")
    with PipelineDriver([pipeline], clock=VirtualClock(START), partitions=2) as driver:
        for user, n in [("a", 1), ("b", 10), ("a", 2), ("b", 20), ("a", 3)]:
            driver.pipe("events", {"u": user, "n": n, "t": START}, key=user, headers={"trace": user})
        out = driver.outputs("totals-out")
        state = driver.state("totals", step_id(driver))
    running = [(r.value["user"], r.value["total"]) for r in out if "total" in r.value]
    # Per partition in offset order; keys of two partitions may interleave either way.
    assert [t for t in running if t[0] == "a"] == [("a", 1), ("a", 3), ("a", 6)]
    assert [t for t in running if t[0] == "b"] == [("b", 10), ("b", 30)]
    assert [r.key for r in out] == [r.value["user"] for r in out]
    assert all(r.value["trace"] == r.value["user"] for r in out)  # the record's headers reach process()
    assert all(r.context is not None and r.context.pipeline_id == "totals" for r in out)
    # [state, event-time timers, wall-clock timers] per key.
    assert state["a"] == [{"total": 6}, [START + 10], [START + 60]]
    assert state["b"] == [{"total": 30}, [START + 10], [START + 60]]


def test_event_time_timers_fire_when_the_watermark_passes_them_in_time_order() -> None:
    with PipelineDriver([totals(ooo="2s")], clock=VirtualClock(START)) as driver:
        driver.pipe("events", {"u": "a", "n": 1, "t": START})
        driver.pipe("events", {"u": "b", "n": 5, "t": START + 1})
        driver.pipe("events", {"u": "a", "n": 2, "t": START + 11})  # watermark START + 9: nothing due
        assert not [v for v in values(driver) if "closing_total" in v]
        driver.pipe("events", {"u": "c", "n": 7, "t": START + 12})  # watermark START + 10: a's timer
        assert [v for v in values(driver) if "closing_total" in v] == [
            {"user": "a", "closing_total": 3, "at": START + 10}
        ]
        driver.pipe("events", {"u": "c", "n": 1, "t": START + 30})  # b's timer, then c's
        fired = [(v["user"], v["at"]) for v in values(driver) if "closing_total" in v]
    assert fired == [("a", START + 10), ("b", START + 11), ("c", START + 22)]
    closing = [r for r in driver.outputs("totals-out") if "closing_total" in r.value]
    # A timer's output is at the timer's event time; the record it went out with gave its context.
    assert all(r.context is not None for r in closing)


def test_wall_clock_timers_fire_when_the_virtual_clock_passes_them() -> None:
    clock = VirtualClock(START)
    with PipelineDriver([totals()], clock=clock) as driver:
        driver.pipe("events", {"u": "a", "n": 1, "t": START})
        driver.advance(30)
        driver.pipe("events", {"u": "b", "n": 1, "t": START})
        driver.advance(29.5)
        assert not [v for v in values(driver) if "heartbeat" in v]
        driver.advance(0.5)  # START + 60: a's heartbeat
        assert [v["user"] for v in values(driver) if "heartbeat" in v] == ["a"]
        driver.advance(30)  # START + 90: b's
        beats = [(v["user"], v["heartbeat"]) for v in values(driver) if "heartbeat" in v]
        state = driver.state("totals", step_id(driver))
    assert beats == [("a", START + 60), ("b", START + 90)]
    assert state["a"][2] == []  # fired timers leave the state


def test_an_exception_dead_letters_the_record_and_leaves_its_key_unchanged() -> None:
    with PipelineDriver([totals()], clock=VirtualClock(START)) as driver:
        driver.pipe("events", {"u": "a", "n": 1, "t": START})
        driver.pipe("events", {"u": "a", "n": 100, "t": START, "boom": True})
        driver.pipe("events", {"u": "a", "n": 2, "t": START})
        dead = driver.dead_letters("totals")
        step = step_id(driver)
        running = [v["total"] for v in values(driver) if "total" in v]
    assert running == [1, 3]  # the failed call's state change did not stick
    assert len(dead) == 1
    assert dead[0].headers["cadenza-operator"] == step.encode()
    assert dead[0].headers["cadenza-error-type"] == b"ValueError"


class Unstorable(Processor):
    def init(self, context: ProcessorContext) -> None:
        self.ctx = context

    def process(self, record: ProcessorRecord) -> None:
        self.ctx.state = object()  # the changelog cannot hold it
        self.ctx.forward(record.value)


class FailingTimer(Processor):
    def init(self, context: ProcessorContext) -> None:
        self.ctx = context

    def process(self, record: ProcessorRecord) -> None:
        self.ctx.schedule_event_timer(record.timestamp)
        self.ctx.forward(record.value)

    def on_event_timer(self, key: Any, when: float) -> None:
        self.ctx.forward("never")
        raise RuntimeError(f"timer of {key}")


class FailingInit(Processor):
    calls = 0

    def init(self, context: ProcessorContext) -> None:
        FailingInit.calls += 1
        if FailingInit.calls == 1:
            raise OSError("init failed once")
        self.ctx = context

    def process(self, record: ProcessorRecord) -> None:
        self.ctx.forward(record.value)


def test_unstorable_state_a_failing_timer_and_a_failing_init_are_dead_lettered_and_the_step_goes_on() -> None:
    pipelines = [
        _with_sink("unstorable", Unstorable, "u-out"),
        _with_sink("timer", FailingTimer, "t-out"),
        _with_sink("init", FailingInit, "i-out"),
    ]
    with PipelineDriver(pipelines, clock=VirtualClock(START)) as driver:
        for n in range(2):
            driver.pipe("events", {"u": "a", "n": n, "t": START + n})
        kinds = {
            name: [bytes(d.headers["cadenza-error-type"] or b"") for d in driver.dead_letters(name)]
            for name in driver.graphs
        }
        outs = {topic: [r.value for r in driver.outputs(topic)] for topic in ("u-out", "t-out", "i-out")}
    assert [kind.startswith(b"UnsupportedValue") for kind in kinds["unstorable"]] == [True, True]
    assert outs["u-out"] == []  # the call's forward went with its state
    # Each record's own timer fires as its watermark passes it: the callback fails, the step goes on.
    assert kinds["timer"] == [b"RuntimeError", b"RuntimeError"]
    assert [v["n"] for v in outs["t-out"]] == [0, 1]
    assert kinds["init"] == [b"OSError"]  # init is tried again with the next record
    assert [v["n"] for v in outs["i-out"]] == [1]


def _with_sink(name: str, factory: Any, topic: str) -> Pipeline:
    pipeline = Pipeline(name, tenant="t", latency_target="1s")
    stream = pipeline.source("events", timestamp=_event_time).key_by(_user)
    stream.process(factory).sink(topic)
    return pipeline


def test_restart_restores_state_and_timers_from_the_changelog() -> None:
    closed: list[int] = []

    class Tracked(RunningTotal):
        def close(self) -> None:
            closed.append(id(self))

    with PipelineDriver([totals(factory=Tracked, ooo="2s")], clock=VirtualClock(START)) as driver:
        for user, n in [("a", 1), ("b", 10), ("a", 2)]:
            driver.pipe("events", {"u": user, "n": n, "t": START})
        op = process_op(driver)
        replays: dict[int, ChangelogReplay] = {}
        for partition, records in op.changelog_writes():  # what the worker writes after the batch
            replay = replays.setdefault(partition, ChangelogReplay())
            for key, value in records:
                replay.apply(key, value)
        for partition, replay in replays.items():  # the partition goes, and comes back restored
            op.drop(partition)
            assert driver.state("totals", step_id(driver)) == {}
            op.restore(partition, replay.entries(), replay.position)
        assert len(closed) == 1  # the dropped partition's processor was closed
        driver.pipe("events", {"u": "a", "n": 4, "t": START + 20})
        out = values(driver)
    assert out[-3:-2] == [{"user": "a", "total": 7, "trace": None}]  # the restored total goes on
    # a's and b's event timers at START + 10 came back with the state and fire as the watermark passes.
    # Timers due at one time fire in no particular order of keys.
    assert sorted(out[-2:], key=lambda v: v["user"]) == [
        {"user": "a", "closing_total": 7, "at": START + 10},
        {"user": "b", "closing_total": 10, "at": START + 10},
    ]


def test_process_needs_a_keyed_stream_and_a_callable() -> None:
    pipeline = Pipeline("p", tenant="t", latency_target="1s")
    source = pipeline.source("events")
    with pytest.raises(PipelineDefinitionError, match="key_by"):
        source.process(RunningTotal)
    with pytest.raises(PipelineDefinitionError, match="Processor subclass"):
        source.key_by(_user).process(RunningTotal())  # type: ignore[arg-type]


def test_the_graph_gives_the_process_step_a_changelog_and_describe_names_it() -> None:
    graph = totals().compile()
    node = next(n for n in graph.nodes if n.kind == "process")
    assert node.stateful
    assert node.changelog_topic == f"totals.{node.id}.changelog"
    assert any(t.kind == "changelog" and t.node_id == node.id for t in graph.internal_topics)
    assert "process RunningTotal" in describe([graph])
    # The kind survives the graph's JSON form (what is logged, shipped and compared between versions).
    assert PipelineGraph.model_validate_json(graph.model_dump_json()).node(node.id).kind == "process"


class EchoThenBeat(Processor):
    """Forwards each record, and its key once more from a wall-clock timer a minute later."""

    def init(self, context: ProcessorContext) -> None:
        self.ctx = context

    def process(self, record: ProcessorRecord) -> None:
        self.ctx.schedule_wall_clock_timer(self.ctx.now() + 60)
        self.ctx.forward({"u": self.ctx.key, "what": "record"})

    def on_wall_clock_timer(self, key: Any, when: float) -> None:
        self.ctx.forward({"u": key, "what": "beat"})


class Tally(Processor):
    def init(self, context: ProcessorContext) -> None:
        self.ctx = context

    def process(self, record: ProcessorRecord) -> None:
        self.ctx.state = (self.ctx.state or 0) + 1
        self.ctx.forward({"u": self.ctx.key, "seen": self.ctx.state, "what": record.value["what"]})


def test_a_wall_clock_timers_output_through_a_key_by_is_not_taken_for_a_copy() -> None:
    # The timer's output goes on with the partition's last unit, which already sent a record through
    # the key_by, and another partition's unit went through the key_by since: the repartition reader
    # must still see a new record, not a replayed copy of the first one.
    pipeline = Pipeline("beats", tenant="t", latency_target="1s")
    first = pipeline.source("events", key=str, timestamp=_event_time).process(EchoThenBeat)
    first.key_by(_user).process(Tally).sink("tally-out")
    with PipelineDriver([pipeline], clock=VirtualClock(START), partitions=2) as driver:
        driver.pipe("events", {"t": START}, key="a", partition=0)
        driver.pipe("events", {"t": START}, key="b", partition=1)
        driver.advance(61)
        seen = sorted((r.value["u"], r.value["seen"], r.value["what"]) for r in driver.outputs("tally-out"))
        dead = driver.dead_letters("beats")
    assert seen == [("a", 1, "record"), ("a", 2, "beat"), ("b", 1, "record"), ("b", 2, "beat")]
    assert dead == []


ROOT = Path(__file__).resolve().parents[4]


def _example(name: str) -> dict[str, Any]:
    """Run one of the docs' example files (``docs/tutorial/<name>.py``, shown on the site as it is)."""
    return runpy.run_path(str(ROOT / "docs" / "tutorial" / f"{name}.py"))


def test_the_docs_first_of_the_minute_example_runs_as_described() -> None:
    pipeline = _example("first_of_the_minute")["first_clicks"]
    with PipelineDriver([pipeline], clock=VirtualClock(START)) as driver:
        for offset in (0, 30, 61, 62):
            driver.pipe("clicks", {"user": "ann", "ts": START + offset}, key="ann")
        driver.pipe("clicks", {"user": "bob", "ts": START + 62}, key="bob")
        emitted = [(r.value["user"], r.value["ts"] - START) for r in driver.outputs("first-clicks")]
    # The record at +61 moves the watermark past the timer at +60: it is processed first (and
    # suppressed), then the timer clears the state, so +62 is the next first click.
    assert emitted == [("ann", 0), ("ann", 62), ("bob", 62)]


def test_the_docs_processor_example_runs_as_described() -> None:
    pipeline = _example("quiet_devices")["devices"]
    with PipelineDriver([pipeline], clock=VirtualClock(START)) as driver:
        driver.pipe("readings", {"ts": START}, key="d")
        driver.pipe("readings", {"ts": START + 10}, key="d")
        driver.pipe("readings", {"ts": START + 65}, key="e")  # d's deadline (+70) not reached yet
        assert driver.outputs("alerts") == []
        driver.pipe("readings", {"ts": START + 100}, key="e")
        alerts = [r.value for r in driver.outputs("alerts")]
        state = driver.state("quiet-devices", "2-process")
    assert alerts == [{"device": "d", "quiet_since": START + 10, "readings": 2}]
    assert "d" not in state  # forgotten until it speaks again


class StateInInit(Processor):
    def init(self, context: ProcessorContext) -> None:
        self.ctx = context
        context.state = "no key here"

    def process(self, record: ProcessorRecord) -> None:
        self.ctx.forward(record.value)


def test_state_used_in_init_is_a_clear_error_and_dead_letters_the_record() -> None:
    pipeline = Pipeline("early", tenant="t", latency_target="1s")
    pipeline.source("events", key=str, timestamp=_event_time).process(StateInInit).sink("early-out")
    with PipelineDriver([pipeline], clock=VirtualClock(START)) as driver:
        driver.pipe("events", {"t": START}, key="a")
        dead = driver.dead_letters("early")
        out = driver.outputs("early-out")
    assert out == []
    assert [d.headers["cadenza-error-type"] for d in dead] == [b"RuntimeError"]
    assert b"needs a current key" in (dead[0].headers["cadenza-error"] or b"")


class InitFailsOnce(Processor):
    attempts = 0

    def init(self, context: ProcessorContext) -> None:
        self.ctx = context
        InitFailsOnce.attempts += 1
        if InitFailsOnce.attempts == 2:  # the second instance: after the partition came back
            raise OSError("not now")

    def process(self, record: ProcessorRecord) -> None:
        self.ctx.schedule_event_timer(record.timestamp + 5)
        self.ctx.forward({"n": record.value["n"]})

    def on_event_timer(self, key: Any, when: float) -> None:
        self.ctx.forward({"timer": when})


def test_timers_wait_for_a_processor_whose_init_failed_and_the_record_is_dead_lettered_once() -> None:
    pipeline = Pipeline("retry", tenant="t", latency_target="1s")
    pipeline.source("events", key=str, timestamp=_event_time).process(InitFailsOnce).sink("retry-out")
    with PipelineDriver([pipeline], clock=VirtualClock(START)) as driver:
        driver.pipe("events", {"n": 0, "t": START}, key="a")
        op = process_op(driver)
        replay = ChangelogReplay()
        for _, records in op.changelog_writes():
            for key, value in records:
                replay.apply(key, value)
        op.drop(0)
        op.restore(0, replay.entries(), replay.position)
        driver.pipe("events", {"n": 1, "t": START + 10}, key="a")  # init fails; the timer at +5 is due
        assert len(driver.dead_letters("retry")) == 1
        assert [r.value for r in driver.outputs("retry-out")] == [{"n": 0}]
        driver.pipe("events", {"n": 2, "t": START + 11}, key="a")  # init works: record, then the timer
        out = [r.value for r in driver.outputs("retry-out")]
    assert out == [{"n": 0}, {"n": 2}, {"timer": START + 5}]


class FailingBeat(Processor):
    def init(self, context: ProcessorContext) -> None:
        self.ctx = context

    def process(self, record: ProcessorRecord) -> None:
        self.ctx.schedule_wall_clock_timer(self.ctx.now() + 1)
        self.ctx.forward(record.value)

    def on_wall_clock_timer(self, key: Any, when: float) -> None:
        raise RuntimeError("beat failed")


def test_with_on_error_stop_a_failing_wall_clock_timer_stops_its_pipeline_only() -> None:
    strict = Pipeline("strict", tenant="t", latency_target="1s", on_error="stop")
    strict.source("events", key=str, timestamp=_event_time).process(FailingBeat).sink("strict-out")
    lenient = _with_sink("lenient", FailingBeat, "lenient-out")
    with PipelineDriver([strict, lenient], clock=VirtualClock(START)) as driver:
        driver.pipe("events", {"u": "a", "t": START}, key="a")
        driver.advance(2)  # both timers fire and fail
        driver.pipe("events", {"u": "a", "t": START + 2}, key="a")
        stopped = dict(driver.stopped)
        strict_out = driver.outputs("strict-out")
        lenient_out = driver.outputs("lenient-out")
        lenient_dead = driver.dead_letters("lenient")
    assert list(stopped) == ["strict"]
    assert len(strict_out) == 1  # nothing after the stop
    assert len(lenient_out) == 2  # the other pipeline goes on; its failure is a dead letter
    assert [d.headers["cadenza-error-type"] for d in lenient_dead] == [b"RuntimeError"]
