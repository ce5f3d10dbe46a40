"""When a key_by sends its progress records: on the interval, and early when an input partition has
just moved past the next window close downstream; and heartbeats, progress said again for input
partitions whose records wait in the worker, so that a window downstream does not time them out
while they are only late in reaching the key_by (``docs/concepts/watermarks.md``). What the records say
does not change. No broker: the operators with a recording output (and a virtual clock)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, cast

import pytest
from confluent_kafka import Message

from cadenza.pipelines import Tumbling
from cadenza.pipelines.graph import NodeFunctions
from cadenza.worker.engine.context_stamps import first_close_after
from cadenza.worker.engine.counters import WorkerCounters
from cadenza.worker.engine.dead_letter import DeadLetters
from cadenza.worker.engine.operators.base import Operator
from cadenza.worker.engine.operators.routing import (
    HEARTBEAT_FLOOR,
    URGENT_PROGRESS_SHARE,
    KeyByOp,
    progress_due,
)
from cadenza.worker.engine.operators.window_step import WindowOp
from cadenza.worker.engine.unit import Unit
from cadenza.worker.engine.wire import PROGRESS_HEADER, unpack_progress
from tests.worker.recording_output import RecordingOutput


def _progress(output: RecordingOutput) -> list[tuple[int, int, float]]:
    """(repartition partition, upstream partition, event time) of the progress records, in order."""
    return [
        (r.partition, *unpack_progress(r.headers[PROGRESS_HEADER]))
        for r in output.records
        if PROGRESS_HEADER in r.headers
    ]


class _Nothing(Operator):
    def process(self, unit: Unit, key: Any, value: Any, event_time: float, window: Any) -> None:
        pass


def _window(
    size: float,
    out_of_orderness: float,
    output: RecordingOutput,
    counters: WorkerCounters | None = None,
    *,
    inputs: tuple[int, ...] = (0,),
    idle_timeout: float | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> WindowOp:
    """A count per key in tumbling windows of ``size`` s, its results dropped."""
    counters = counters if counters is not None else WorkerCounters()
    return WindowOp(
        "count",
        Tumbling(size),
        NodeFunctions(init=lambda: 0, add=lambda acc, v: acc + 1, result=lambda acc: acc),
        allowed_lateness=0.0,
        inputs=inputs,
        max_out_of_orderness=out_of_orderness,
        changelog_topic="cl",
        next=_Nothing("next"),
        dead=DeadLetters("dead", "late", output.as_output(), counters),
        counters=counters,
        idle_timeout=idle_timeout,
        clock=clock,
    )


def _key_by(output: RecordingOutput, partitions: int) -> KeyByOp:
    return KeyByOp(
        "rekey",
        lambda value: value,
        "rep",
        output=output.as_output(),
        dead=DeadLetters("dead", "late", output.as_output(), WorkerCounters()),
        partitions=partitions,
    )


def _urgent(op: KeyByOp) -> bool:
    """Read through a call: the flag changes under the calls between two asserts."""
    return op.urgent


def _unit(
    partition: int, offset: int, event_time: float, origin: tuple[int, int, int, float] | None = None
) -> Unit:
    unit = Unit("p", "rekey", "in", partition, offset, None, "k", event_time, cast(Message, None))
    unit.origin = origin
    return unit


def test_progress_is_due_on_the_interval_or_early_when_urgent() -> None:
    output = RecordingOutput()
    calm, hurried = _key_by(output, 2), _key_by(output, 2)
    hurried.urgent = True
    interval = 0.05
    assert not progress_due([calm], 0.049, interval)
    assert progress_due([calm], 0.05, interval)
    assert progress_due([calm, hurried], interval * URGENT_PROGRESS_SHARE, interval)
    assert not progress_due([calm, hurried], interval * URGENT_PROGRESS_SHARE * 0.99, interval)
    assert not progress_due([], 0.0, interval)


def test_first_close_after_is_strictly_later_than_the_event_time() -> None:
    release = first_close_after(_window(1.0, 0.05, RecordingOutput()))
    assert release(0.3) == pytest.approx(1.05)
    assert release(1.04) == pytest.approx(1.05)
    assert release(1.05) == pytest.approx(2.05)  # at the close itself: that window is released
    assert release(1.5) == pytest.approx(2.05)


def test_a_record_past_the_next_close_makes_the_key_by_urgent_and_the_broadcast_calms_it() -> None:
    output = RecordingOutput()
    op = _key_by(output, 3)
    op.release = first_close_after(_window(1.0, 0.05, output))
    op.process(_unit(0, 0, 0.2), "a", "a", 0.2, None)
    op.process(_unit(1, 0, 0.3), "b", "b", 0.3, None)
    assert not _urgent(op)  # nothing sent yet: the interval decides the first progress
    assert op.broadcast_progress() == 2 * 3
    op.process(_unit(0, 1, 0.9), "a", "a", 0.9, None)
    op.process(_unit(0, 2, 1.04), "a", "a", 1.04, None)
    assert not _urgent(op)  # partition 0 has not reached 1.05, the close after its last progress
    op.process(_unit(1, 1, 1.06), "b", "b", 1.06, None)
    assert _urgent(op)  # partition 1 passed it: some window downstream may close on this news
    output.records.clear()
    assert op.broadcast_progress() == 2 * 3
    assert not _urgent(op)
    sent = sorted(
        (partition, *unpack_progress(headers[PROGRESS_HEADER]))
        for partition, headers in ((r.partition, r.headers) for r in output.records)
        if PROGRESS_HEADER in headers
    )
    # The same records a timer-driven broadcast would send: each input's largest event time, to
    # every partition of the topic.
    assert sent == sorted((p, upstream, t) for p in range(3) for upstream, t in ((0, 1.04), (1, 1.06)))
    # Nothing grew: not urgent, nothing sent.
    op.process(_unit(1, 2, 1.0), "b", "b", 1.0, None)
    assert not _urgent(op) and op.broadcast_progress() == 0


def test_without_a_window_downstream_progress_follows_the_interval_only() -> None:
    output = RecordingOutput()
    op = _key_by(output, partitions=2)
    op.process(_unit(0, 0, 0.2), "a", "a", 0.2, None)
    op.broadcast_progress()
    op.process(_unit(0, 1, 50.0), "a", "a", 50.0, None)
    assert not _urgent(op)


def test_a_partition_nothing_reached_yet_beats_at_the_floor_on_every_partition() -> None:
    output = RecordingOutput()
    op = _key_by(output, 3)
    assert op.heartbeat([1]) == 3
    assert _progress(output) == [(p, 1, HEARTBEAT_FLOOR) for p in range(3)]


def test_a_heartbeat_repeats_what_was_sent_and_leaves_growth_to_the_broadcast() -> None:
    output = RecordingOutput()
    op = _key_by(output, 2)
    op.process(_unit(0, 0, 5.0), "k", "a", 5.0, None)
    assert op.heartbeat([0]) == 0  # 5.0 not sent yet: the broadcast sends it
    assert op.broadcast_progress() == 2
    output.records.clear()
    assert op.heartbeat([0]) == 2
    assert _progress(output) == [(0, 0, 5.0), (1, 0, 5.0)]
    output.records.clear()
    assert op.broadcast_progress() == 0  # a heartbeat is no growth


def test_without_a_watermark_downstream_a_key_by_beats_nothing() -> None:
    output = RecordingOutput()
    assert _key_by(output, 0).heartbeat([0, 1]) == 0
    assert output.records == []


class _Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _late_records_when_partition_1_waits_upstream(heartbeats: bool) -> tuple[int, int]:
    """A window at repartition partition 0 with upstream partitions 0 and 1, idle timeout 1 s.
    Upstream partition 1's next record waits three idle timeouts in its worker (queued behind other
    work) while partition 0's records move past the window; then it arrives. Returns the late
    records and the window results."""
    clock, output = _Clock(), RecordingOutput()
    counters = WorkerCounters()
    window = _window(10.0, 0.0, output, counters, inputs=(0, 1), idle_timeout=1.0, clock=clock)
    beats = RecordingOutput()
    upstream_1 = _key_by(beats, 2)  # the key_by of upstream partition 1, in another worker
    offsets = iter(range(1000))

    def record(source: int, event_time: float) -> None:
        offset = next(offsets)
        unit = _unit(0, offset, event_time, (source, offset, 0, event_time))
        window.process(unit, "k", "v", event_time, None)

    record(0, 1.0)
    record(1, 2.0)
    upstream_1.process(_unit(1, 0, 2.0), "k", "v", 2.0, None)
    upstream_1.broadcast_progress()
    for step in range(12):
        clock.t += 0.25
        if heartbeats:
            beats.records.clear()
            upstream_1.heartbeat([1])
            for partition, source, event_time in _progress(beats):
                if partition == 0:  # what reaches this window's repartition partition
                    offset = next(offsets)
                    window.progress(
                        _unit(0, offset, event_time, (source, -1, -1, event_time)), source, event_time
                    )
        record(0, 2.0 + step)
    record(0, 25.0)
    record(1, 5.0)  # upstream partition 1's waiting record reaches the window at last
    return counters.late, counters.window_results


def test_heartbeats_keep_an_input_whose_records_wait_upstream_from_timing_out() -> None:
    late, results = _late_records_when_partition_1_waits_upstream(heartbeats=True)
    assert late == 0
    assert results == 0  # [0, 10) waits for upstream partition 1


def test_without_heartbeats_the_same_wait_times_the_input_out_and_its_record_is_late() -> None:
    late, results = _late_records_when_partition_1_waits_upstream(heartbeats=False)
    assert late == 1
    assert results == 2  # [0, 10) closed without partition 1's record at 5.0, then [10, 20)


def test_at_closes_progress_that_passes_no_window_close_waits_for_one_or_a_keep_alive_round() -> None:
    output = RecordingOutput()
    op = _key_by(output, 2)
    op.release = first_close_after(_window(1.0, 0.05, output))  # closes at 1.05, 2.05, ...
    op.at_closes = True
    op.process(_unit(0, 0, 0.2), "a", "a", 0.2, None)
    assert op.broadcast_progress() == 2  # the first progress of a partition always goes
    op.process(_unit(0, 1, 0.9), "a", "a", 0.9, None)
    op.process(_unit(0, 2, 1.04), "a", "a", 1.04, None)
    assert op.broadcast_progress() == 0  # 1.04 passes no close: it would release nothing downstream
    op.process(_unit(0, 3, 1.05), "a", "a", 1.05, None)
    assert _urgent(op)
    output.records.clear()
    assert op.broadcast_progress() == 2  # at the close: sent, and at once (urgent)
    assert _progress(output) == [(0, 0, 1.05), (1, 0, 1.05)]
    op.process(_unit(0, 4, 1.5), "a", "a", 1.5, None)
    assert op.broadcast_progress() == 0
    output.records.clear()
    assert op.broadcast_progress(everything=True) == 2  # a keep-alive round sends what was held
    assert _progress(output) == [(0, 0, 1.5), (1, 0, 1.5)]


def test_without_at_closes_every_growth_goes_out() -> None:
    output = RecordingOutput()
    op = _key_by(output, 2)
    op.release = first_close_after(_window(1.0, 0.05, output))
    op.process(_unit(0, 0, 0.2), "a", "a", 0.2, None)
    op.broadcast_progress()
    op.process(_unit(0, 1, 0.3), "a", "a", 0.3, None)
    assert op.broadcast_progress() == 2
