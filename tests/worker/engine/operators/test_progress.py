"""Progress at a sub-topology's entry: a record a filter drops before a key_by still tells the
windows downstream how far its source partition got (no broker: the pipeline driver)."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from cadenza.pipelines import Pipeline, Session, Tumbling
from cadenza.testing import PipelineDriver
from cadenza.worker.engine.counters import WorkerCounters
from cadenza.worker.engine.operators.progress import FrontierTap, ProgressGate, ProgressTap
from cadenza.worker.engine.operators.routing import KeyByOp
from cadenza.worker.engine.tasks import build_tasks
from tests.worker.recording_output import RecordingOutput


def _user(value: dict[str, Any]) -> str:
    return str(value["u"])


def _kept(value: dict[str, Any]) -> bool:
    return bool(value["keep"])


def _event_time(value: dict[str, Any]) -> float:
    return float(value["t"])


def filtered_counts() -> Pipeline:
    pipeline = Pipeline("kept", tenant="t", latency_target="1s")
    (
        pipeline.source("events", timestamp=_event_time)
        .filter(_kept)
        .map(lambda v: v)
        .key_by(_user)
        .window(Tumbling("1s"))
        .count()
        .sink("counts-out")
    )
    return pipeline


@settings(max_examples=40, deadline=None)
@given(
    partitions=st.integers(2, 3),
    steps=st.lists(
        st.tuples(st.sampled_from("abc"), st.floats(0.0, 0.7), st.integers(0, 2), st.booleans()),
        min_size=1,
        max_size=40,
    ),
)
def test_records_a_filter_drops_still_move_the_windows_downstream(
    partitions: int, steps: list[tuple[str, float, int, bool]]
) -> None:
    # Event times never go back, so nothing is late. The last record of every source partition is
    # one the filter drops, far ahead: every window closes only if dropped records are progress
    # (there is no idle timeout to close them otherwise).
    t = 100.0
    events: list[tuple[str, float, int, bool]] = []
    for user, gap, partition, keep in steps:
        t += gap
        events.append((user, t, partition % partitions, keep))
    with PipelineDriver([filtered_counts()], partitions=partitions, idle_timeout=None) as driver:
        for user, at, partition, keep in events:
            driver.pipe("events", {"u": user, "t": at, "keep": keep}, partition=partition)
        for partition in range(partitions):
            driver.pipe("events", {"u": "end", "t": t + 10.0, "keep": False}, partition=partition)
        got = Counter(
            {
                (r.value["key"], r.value["window_start"], r.value["window_end"]): r.value["value"]
                for r in driver.outputs("counts-out")
            }
        )
        assert driver.late("kept") == []
        step = next(n.id for n in driver.graphs["kept"].nodes if n.kind == "window_aggregate")
        assert dict(driver.state("kept", step)) == {}  # every window closed
    expected = Counter(
        (user, float(math.floor(at)), float(math.floor(at) + 1)) for user, at, _, keep in events if keep
    )
    assert got == expected


def test_only_a_key_by_reached_through_stateless_steps_learns_its_progress_at_the_entry() -> None:
    pipeline = Pipeline("chain", tenant="t", latency_target="1s")
    windowed = (
        pipeline.source("events", timestamp=_event_time)
        .filter(_kept)
        .key_by(_user)
        .window(Tumbling("1s"))
        .count()
    )
    windowed.key_by(lambda result: "all").window(Tumbling("1s")).count().sink("totals")
    graph = pipeline.compile()
    topics = {node.repartition_topic for node in graph.nodes if node.repartition_topic}
    partitions = {"events": 2, **{str(topic): 2 for topic in topics}}
    tasks = build_tasks(graph, RecordingOutput().as_output(), WorkerCounters(), partitions=partitions)
    source = next(task for task in tasks if task.subtopology.input_kind == "source")
    after_window = next(task for task in tasks if task.subtopology.input_kind == "repartition" and task.keyed)
    (first,) = source.keyed
    (second,) = after_window.keyed
    assert isinstance(first, KeyByOp) and first.progress_at_entry
    assert isinstance(source.root, ProgressTap) and source.root.keyed == (first,)
    # After a window, a key_by is handed results whose event times are the windows', not the
    # records': it keeps learning its progress from what reaches it.
    assert not second.progress_at_entry
    assert not isinstance(after_window.root, ProgressTap)


# -- a key_by after a key_by: its progress is the frontier of its input partition ----------------------

_REGION = {"a": "north", "b": "north", "c": "south", "d": "south"}


def _region(value: dict[str, Any]) -> str:
    return _REGION[str(value["u"])]


def regional_counts() -> Pipeline:
    """Re-keyed twice (by user, then by region) before a count per region: the second key_by reads
    a repartition topic, whose partitions interleave the records of every source partition."""
    pipeline = Pipeline("regions", tenant="t", latency_target="1s")
    (
        pipeline.source("visits", timestamp=_event_time)
        .key_by(_user)
        .map(lambda v: v)
        .key_by(_region)
        .window(Tumbling("1s"))
        .count()
        .sink("regions-out")
    )
    return pipeline


def _regional(driver: PipelineDriver) -> Counter[tuple[str, float]]:
    return Counter(
        {(r.value["key"], r.value["window_start"]): r.value["value"] for r in driver.outputs("regions-out")}
    )


def test_a_second_key_by_passes_on_how_far_its_slowest_upstream_partition_got() -> None:
    # Source partition 0 runs 20 s ahead before partition 1 delivers anything. Every user's records
    # meet in the first repartition topic's partitions, so the second key_by's input partition sees
    # partition 0's records at 20 s first: the largest event time it saw is not how far it got.
    with PipelineDriver([regional_counts()], partitions=2, idle_timeout=None) as driver:
        for t in (0.5, 1.5, 20.5):
            for user in "ac":
                driver.pipe("visits", {"u": user, "t": t}, partition=0)
        for t in (0.7, 1.7):
            for user in "bd":
                driver.pipe("visits", {"u": user, "t": t}, partition=1)
        assert driver.late("regions") == []
        # Partition 1 got to 1.7 s: [0, 1) closes, with its records counted; [1, 2) waits.
        assert _regional(driver) == Counter({("north", 0.0): 2, ("south", 0.0): 2})
        for partition in (0, 1):
            driver.pipe("visits", {"u": "a", "t": 30.0}, partition=partition)
        assert driver.late("regions") == []
        assert _regional(driver) == Counter(
            {
                ("north", 0.0): 2,
                ("north", 1.0): 2,
                ("north", 20.0): 1,
                ("south", 0.0): 2,
                ("south", 1.0): 2,
                ("south", 20.0): 1,
            }
        )


@settings(max_examples=40, deadline=None)
@given(
    partitions=st.integers(2, 3),
    steps=st.lists(
        st.tuples(st.sampled_from("abcd"), st.floats(0.0, 3.0), st.integers(0, 2)),
        min_size=1,
        max_size=40,
    ),
)
def test_windows_after_two_key_bys_do_not_depend_on_how_far_apart_the_source_partitions_are(
    partitions: int, steps: list[tuple[str, float, int]]
) -> None:
    # Each source partition's event times grow on their own clock, so any interleaving of the steps
    # puts some partitions seconds ahead of others; within a partition nothing is out of order, so
    # nothing may be late. A final record per partition, far ahead, closes every window.
    clocks = [100.0] * partitions
    events: list[tuple[str, float, int]] = []
    for user, gap, drawn in steps:
        partition = drawn % partitions
        clocks[partition] += gap
        events.append((user, clocks[partition], partition))
    end = max(clocks) + 10.0
    with PipelineDriver([regional_counts()], partitions=partitions, idle_timeout=None) as driver:
        for user, at, partition in events:
            driver.pipe("visits", {"u": user, "t": at}, partition=partition)
        for partition in range(partitions):
            driver.pipe("visits", {"u": "a", "t": end}, partition=partition)
        assert driver.late("regions") == []
        got = _regional(driver)
    expected = Counter((_REGION[user], float(math.floor(at))) for user, at, _ in events)
    assert got == expected


def test_a_key_by_after_a_key_by_learns_its_progress_from_the_frontier_of_its_input() -> None:
    graph = regional_counts().compile()
    topics = {node.repartition_topic for node in graph.nodes if node.repartition_topic}
    partitions = {"visits": 3, **{str(topic): 3 for topic in topics}}
    tasks = build_tasks(graph, RecordingOutput().as_output(), WorkerCounters(), partitions=partitions)
    middle = next(task for task in tasks if task.subtopology.input_kind == "repartition" and task.keyed)
    (second,) = middle.keyed
    assert second.progress_at_entry
    assert isinstance(middle.root, ProgressGate)
    tap = middle.frontier
    assert isinstance(tap, FrontierTap) and tap.keyed == (second,) and tap.sources == (0, 1, 2)
    assert tap in middle.root.steps  # progress records reach it past the gate


def _key_bys(pipeline: Pipeline) -> dict[str, KeyByOp]:
    """The key_bys that send progress, as a worker's plan builds them (with their window release)."""
    with PipelineDriver([pipeline], partitions=2) as driver:
        return {keyed.topic: keyed for keyed in driver.plan.keyed}


def test_progress_waits_for_window_closes_only_where_one_tumbling_or_hopping_window_reads_it() -> None:
    (tumbling,) = _key_bys(filtered_counts()).values()
    assert tumbling.at_closes
    sessions = Pipeline("sessions", tenant="t", latency_target="1s")
    sessions.source("events", timestamp=_event_time).key_by(_user).window(Session("1s")).count().sink("s")
    (session,) = _key_bys(sessions).values()
    assert not session.at_closes  # any progress may close a session
    # Between two key_bys the first one's progress feeds the second's frontier: all of it counts.
    chain = _key_bys(regional_counts())
    assert [keyed.at_closes for keyed in chain.values()] == [False, True]
