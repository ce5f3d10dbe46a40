"""Parallel steps through PipelineDriver (the engine a worker runs): the same outputs with and without
lessees, in offset order per partition; timeouts, deaths and failures dead-lettered exactly."""

from __future__ import annotations

import json
import os
import random
import time
from typing import Any, Literal

import pytest
from confluent_kafka import Message
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from cadenza import Hopping, Pipeline, Session, Tumbling
from cadenza.testing import PipelineDriver
from cadenza.worker.engine.lessees.hub import LesseeHub

# -- user functions: at module level, so a process lessee can import them ------------------------


def triple(value: dict[str, Any]) -> dict[str, Any]:
    return {**value, "n": value["n"] * 3}


def not_seven(value: dict[str, Any]) -> bool:
    return bool(value["n"] % 7 != 0)


def pairs(value: dict[str, Any]) -> list[dict[str, Any]]:
    return [value, {**value, "copy": True}] if value["n"] % 2 else [value]


def fragile(value: dict[str, Any]) -> dict[str, Any]:
    if value["n"] % 11 == 5:
        raise ValueError(f"no {value['n']}")
    return value


def jittery(value: dict[str, Any]) -> dict[str, Any]:
    time.sleep(random.random() * 0.004)  # outcomes come back out of order
    return value


def hangs_on_13(value: dict[str, Any]) -> dict[str, Any]:
    if value["n"] == 13:
        time.sleep(30.0)
    return value


def dies_on_13(value: dict[str, Any]) -> dict[str, Any]:
    if value["n"] == 13:
        os._exit(3)
    return value


FUNCTIONS = {"triple": triple, "not_seven": not_seven, "pairs": pairs, "fragile": fragile, "jittery": jittery}
KIND_OF = {"triple": "map", "not_seven": "filter", "pairs": "flat_map", "fragile": "map", "jittery": "map"}


def _pipeline(steps: list[tuple[str, Any, str]]) -> Pipeline:
    pipeline = Pipeline("par", tenant="t", latency_target="1s")
    stream: Any = pipeline.source("in", key=str)
    for name, parallel, executor in steps:
        stream = getattr(stream, KIND_OF[name])(FUNCTIONS[name], parallel=parallel, executor=executor)
    stream.sink("out")
    return pipeline


def _run(
    pipeline: Pipeline, values: list[tuple[str, int]], *, lessees: bool, partitions: int = 3
) -> tuple[list[Any], list[Any], LesseeHub | None]:
    with PipelineDriver([pipeline], partitions=partitions, lessees=lessees) as driver:
        hub = driver._engine.lessees
        if hub is not None:
            assert hub.ready(30.0)  # so the calls go to lessees, not to a lessor helping meanwhile
        # One delivery, as one fetch: calls of several partitions are at lessees at once.
        driver._deliver([driver._append("in", {"n": n}, key, None, None, None) for key, n in values])
        outputs = [(r.partition, r.key, r.value) for r in driver.outputs("out")]
        dead = [
            (bytes(r.headers["cadenza-error-type"] or b"").decode(), r.value)
            for r in driver.dead_letters("par")
        ]
    return outputs, dead, hub


steps = st.lists(
    st.tuples(
        st.sampled_from(sorted(FUNCTIONS)),
        st.sampled_from([1, 2, "auto"]),
        st.just("thread"),
    ),
    min_size=1,
    max_size=4,
)
inputs = st.lists(st.tuples(st.sampled_from("abcdef"), st.integers(0, 60)), min_size=1, max_size=60)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps, inputs)
def test_outputs_and_dead_letters_with_lessees_equal_those_without(
    chain: list[tuple[str, Any, str]], values: list[tuple[str, int]]
) -> None:
    pipeline = _pipeline(chain)
    plain = _run(pipeline, values, lessees=False)
    leased = _run(_pipeline(chain), values, lessees=True)
    assert leased[0] == plain[0]  # every output, in order per partition (and in the same order overall)
    assert leased[1] == plain[1]


def test_process_lessees_run_the_calls_and_give_the_same_outputs() -> None:
    chain = [("triple", 2, "process"), ("fragile", 2, "process"), ("pairs", "auto", "process")]
    values = [(k, n) for n in range(300) for k in "ab"][:300]
    plain = _run(_pipeline(chain), values, lessees=False)
    leased = _run(_pipeline(chain), values, lessees=True)
    assert leased[0] == plain[0]
    assert leased[1] == plain[1]
    assert len(plain[1]) == sum(1 for _, n in values if (n * 3) % 11 == 5)
    hub = leased[2]
    assert hub is not None
    # the fixed steps' calls went to lessee processes, not only to the lessor
    assert sum(step.stats.handoff_calls for step in hub.steps) > 0


def test_outputs_leave_in_offset_order_though_calls_finish_out_of_order() -> None:
    values = [("k", n) for n in range(80)]
    outputs, _, hub = _run(_pipeline([("jittery", 4, "thread")]), values, lessees=True, partitions=1)
    assert [value["n"] for _, _, value in outputs] == list(range(80))
    assert hub is not None and hub.steps[0].stats.handoff_calls == 80


def _timeout_pipeline(fn: Any, executor: Literal["process", "thread"]) -> Pipeline:
    pipeline = Pipeline("par", tenant="t", latency_target="1s")
    pipeline.source("in", key=str).map(fn, parallel=2, executor=executor, timeout="300ms").sink("out")
    return pipeline


@pytest.mark.parametrize("executor", ["thread", "process"])
def test_a_call_past_its_timeout_is_dead_lettered_as_step_timeout_and_the_rest_flow(
    executor: Literal["process", "thread"],
) -> None:
    started = time.monotonic()
    outputs, dead, hub = _run(
        _timeout_pipeline(hangs_on_13, executor), [("k", n) for n in range(30)], lessees=True, partitions=1
    )
    assert time.monotonic() - started < 15.0  # not the 30 s the call hangs
    assert [value["n"] for _, _, value in outputs] == [n for n in range(30) if n != 13]
    assert dead == [("StepTimeout", {"n": 13})]
    assert hub is not None
    stats = hub.steps[0].stats
    assert stats.timeouts == 1
    assert stats.abandoned == (1 if executor == "thread" else 0)


def test_a_lessee_that_dies_loses_nothing_and_a_record_that_kills_two_is_dead_lettered() -> None:
    pipeline = Pipeline("par", tenant="t", latency_target="1s")
    pipeline.source("in", key=str).map(dies_on_13, parallel=1, timeout="20s").sink("out")
    outputs, dead, hub = _run(pipeline, [("k", n) for n in range(40)], lessees=True, partitions=1)
    assert [value["n"] for _, _, value in outputs] == [n for n in range(40) if n != 13]
    assert dead == [("LesseeDied", {"n": 13})]
    assert hub is not None and hub.steps[0].stats.deaths == 2


def slow_on_lessee(value: dict[str, Any]) -> dict[str, Any]:
    time.sleep(0.2)
    return value


def test_a_record_run_alone_stays_uncommitted_until_its_call_is_released() -> None:
    """The quarantine's one-at-a-time path (``Engine.run_alone``) holds the record's offset too."""
    pipeline = Pipeline("par", tenant="t", latency_target="1s")
    pipeline.source("in").map(slow_on_lessee, parallel=1, executor="thread", timeout="10s").sink("out")
    with PipelineDriver([pipeline], partitions=1) as driver:
        engine = driver._engine
        message = Message(
            topic="in", partition=0, offset=0, key=None, value=b'{"n": 1}', headers=None, timestamp=(1, 1000)
        )
        engine.run_alone(message, "in", 0, 0)
        assert engine.inflight.advanced() == {("in", 0): 0}  # the call is at its lessee: 0 not done
        deadline = time.monotonic() + 10
        while engine.lessee_held:
            assert time.monotonic() < deadline
            engine.wait_for_lessees(0.05)
            engine.run_for(1.0)
        assert engine.inflight.advanced() == {("in", 0): 1}
        assert [r.value for r in driver.outputs("out")] == [{"n": 1}]


def stops_on_3(value: dict[str, Any]) -> dict[str, Any]:
    if value["n"] == 3:
        raise ValueError("three")
    time.sleep(0.01)
    return value


def test_a_pipeline_stopped_by_a_released_failure_releases_nothing_after_it() -> None:
    """on_error="stop": the failure stops the pipeline at its record; what its lane held is dropped,
    not passed on, and stays uncommitted."""
    pipeline = Pipeline("par", tenant="t", latency_target="1s", on_error="stop")
    pipeline.source("in").map(stops_on_3, parallel=3, executor="thread").sink("out")
    with PipelineDriver([pipeline], partitions=1) as driver:
        driver.pipe_many("in", [{"n": n} for n in range(10)])
        assert [r.value["n"] for r in driver.outputs("out")] == [0, 1, 2]
        assert "par" in driver.stopped
        engine = driver._engine
        assert engine.lessee_held == 0
        assert engine.inflight.progress("in", 0).committable() == 3  # the failed record on stay


def _user(value: dict[str, Any]) -> str:
    return str(value["u"])


def _event_time(value: dict[str, Any]) -> float:
    return float(value["t"])


def _windowed(parallel: Any) -> Pipeline:
    pipeline = Pipeline("win", tenant="t", latency_target="1s")
    (
        pipeline.source("events", timestamp=_event_time, max_out_of_orderness="1s")
        .key_by(_user)
        .map(jittery, parallel=parallel, executor="thread")
        .window(Tumbling("1s"))
        .count()
        .sink("counts")
    )
    return pipeline


events = st.lists(
    st.tuples(st.sampled_from("xyz"), st.floats(0.0, 6.0, allow_nan=False).map(lambda t: round(t, 2))),
    min_size=1,
    max_size=40,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events)
@example([("x", 0.1), ("y", 5.0), ("x", 5.0), ("z", 0.2)])
def test_after_a_key_by_a_window_behind_a_parallel_step_counts_what_it_counts_without(
    values: list[tuple[str, float]],
) -> None:
    """Progress records of the repartition topic arrive with the records; they must not reach the
    window before the records ahead of them come back from the lessees."""
    got = []
    for lessees in (False, True):
        # One source partition: every window closes on the records alone (no idle input).
        with PipelineDriver([_windowed(3)], partitions=1, lessees=lessees) as driver:
            driver.pipe_many("events", [{"u": u, "t": 1_700_000_000.0 + t} for u, t in values], batch=True)
            driver.advance(60.0)
            outputs = sorted(json.dumps([r.key, r.value], sort_keys=True) for r in driver.outputs("counts"))
            late = sorted(json.dumps(r.value, sort_keys=True) for r in driver.late("win"))
            got.append((outputs, late))
    assert got[1] == got[0]


def test_a_key_by_behind_a_parallel_step_learns_progress_from_released_records_not_at_the_entry() -> None:
    """At the entry, a record would vouch for its partition's progress while records before it are
    still at lessees; the key_by's progress records could then overtake them downstream."""

    def key_bys(lessees: bool, parallel: Any) -> list[bool]:
        pipeline = Pipeline("tap", tenant="t", latency_target="1s")
        (
            pipeline.source("events", timestamp=_event_time)
            .map(jittery, parallel=parallel, executor="thread")
            .key_by(_user)
            .window(Tumbling("1s"))
            .count()
            .sink("counts")
        )
        with PipelineDriver([pipeline], lessees=lessees) as driver:
            return [op.progress_at_entry for task in driver.plan.tasks for op in task.keyed]

    assert key_bys(True, 1) == [True]  # a plain step: progress at the entry, as before
    assert key_bys(False, 2) == [True]  # no lessees: the step is plain
    assert key_bys(True, 2) == [False]


def _amount(value: dict[str, Any]) -> float:
    if value["t"] == 3.33:
        raise ValueError("no amount")  # a failed lift: dead-lettered where the plain window's add fails
    time.sleep(random.random() * 0.002)
    return float(value["t"])


def _start() -> list[float]:
    return []


def _add(acc: list[float], value: dict[str, Any]) -> list[float]:
    return sorted([*acc, float(value["t"])])  # the lift law: add(acc, v) == merge(acc, add([], v))


def _merge(a: list[float], b: list[float]) -> list[float]:
    return sorted([*a, *b])


def _aggregates(kind: str, parallel: Any) -> Pipeline:
    pipeline = Pipeline("agg", tenant="t", latency_target="1s")
    specs: dict[str, Tumbling | Hopping | Session] = {
        "tumbling": Tumbling("1s"),
        "hopping": Hopping("2s", "1s"),
        "session": Session("1s"),
    }
    spec = specs[kind]
    windowed = (
        pipeline.source("events", timestamp=_event_time, max_out_of_orderness="0.5s")
        .key_by(_user)
        .window(spec, allowed_lateness="0.5s")
    )
    windowed.sum(_amount, parallel=parallel, executor="thread").sink("sums")
    windowed.aggregate(_start, _add, _merge, parallel=parallel, executor="thread").sink("lists")
    return pipeline


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["tumbling", "hopping", "session"]), events)
@example("tumbling", [("x", 0.1), ("y", 5.0), ("x", 3.33), ("x", 0.2)])
def test_window_aggregates_on_lessees_emit_what_they_emit_without(
    kind: str, values: list[tuple[str, float]]
) -> None:
    """The lift runs on lessees, the window merges it: results, late records and dead letters equal."""
    got = []
    for lessees in (False, True):
        with PipelineDriver([_aggregates(kind, 3)], partitions=1, lessees=lessees) as driver:
            driver.pipe_many("events", [{"u": u, "t": 1_700_000_000.0 + t} for u, t in values], batch=True)
            results = {
                topic: sorted(json.dumps([r.key, r.value], sort_keys=True) for r in driver.outputs(topic))
                for topic in ("sums", "lists")
            }
            late = sorted(json.dumps(r.value, sort_keys=True) for r in driver.late("agg"))
            dead = sorted(json.dumps(r.value, sort_keys=True) for r in driver.dead_letters("agg"))
            held = driver._engine.lessees
            handed = 0 if held is None else sum(step.stats.handoff_calls for step in held.steps)
            got.append((results, late, dead))
    assert got[1] == got[0]
    assert handed > 0  # with lessees, the lifts did go to them
