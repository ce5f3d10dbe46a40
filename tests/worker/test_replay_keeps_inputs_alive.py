"""An input that is replaying copies is not silent: its idle timeout must not let the watermark pass
the records the replay leads up to.

After an unclean stop, an upstream partition re-runs what its dead owner had already written to the
repartition topic; the window drops those copies. Seen in a full CI run under load (the crash-restore
test): the replay of a source partition on probation took longer than the 30 s idle timeout, the
window's watermark moved on without that input, and its next fresh records went to the late topic.
"""

from __future__ import annotations

import math
from typing import Any, cast

from confluent_kafka import Message

from cadenza.operators import WatermarkTracker
from cadenza.pipelines import Tumbling
from cadenza.pipelines.graph import NodeFunctions
from cadenza.worker.engine.counters import WorkerCounters
from cadenza.worker.engine.dead_letter import DeadLetters
from cadenza.worker.engine.operators.base import Operator
from cadenza.worker.engine.operators.window_step import WindowOp
from cadenza.worker.engine.unit import Unit
from tests.worker.recording_output import RecordingOutput


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class _Results(Operator):
    def __init__(self) -> None:
        super().__init__("results")
        self.got: list[tuple[Any, float, Any]] = []

    def process(self, unit: Unit, key: Any, value: Any, event_time: float, window: Any) -> None:
        self.got.append((key, window.start, value))


def test_heard_restarts_the_idle_timeout_without_moving_event_time() -> None:
    clock = _Clock()
    tracker = WatermarkTracker([0, 1], idle_timeout=5.0, clock=clock)
    tracker.observe(0, 10.0)
    tracker.observe(1, 2.0)
    for _ in range(4):  # 12 s of copies from input 1: never 5 s without hearing from it
        clock.now += 3.0
        tracker.observe(0, 10.0 + clock.now)
        tracker.heard(1)
        assert tracker.watermark() == 2.0
    clock.now += 5.0  # now input 1 is silent for the timeout: it stops holding the watermark back
    tracker.observe(0, 30.0)
    assert tracker.watermark() == 30.0
    tracker.heard(1)  # heard again: it holds the watermark at its event time, which never goes back
    tracker.observe(0, 40.0)
    assert tracker.watermark() == 30.0
    tracker.heard(7)  # an input the tracker does not know: nothing to restart
    assert tracker.partitions == [0, 1]


def _unit(offset: int, upstream: int, upstream_offset: int, event_time: float) -> Unit:
    unit = Unit("p", "count", "rep", 0, offset, "k", "v", event_time, cast(Message, None))
    unit.origin = (upstream, upstream_offset, 0, event_time)
    return unit


def test_a_window_waits_for_an_input_that_replays_longer_than_the_idle_timeout() -> None:
    clock, output, results = _Clock(), RecordingOutput(), _Results()
    counters = WorkerCounters()
    op = WindowOp(
        "count",
        Tumbling(1.0),
        NodeFunctions(init=lambda: 0, add=lambda acc, v: acc + 1, result=lambda acc: acc),
        allowed_lateness=0.0,
        max_out_of_orderness=0.0,
        changelog_topic="cl",
        next=results,
        dead=DeadLetters("dead", "late", output.as_output(), counters),
        counters=counters,
        idle_timeout=5.0,
        clock=clock,
        inputs=(0, 1),
    )
    offset = 0

    def feed(upstream: int, upstream_offset: int, event_time: float) -> None:
        nonlocal offset
        unit = _unit(offset, upstream, upstream_offset, event_time)
        offset += 1
        op.process(unit, unit.key, unit.value, event_time, None)

    feed(0, 0, 0.5)
    for n in range(3):
        feed(1, n, 0.6 + n * 0.1)  # input 1 delivers offsets 0-2 of its upstream partition
    for step in range(1, 11):  # then 20 s in which input 1 sends only copies of those three
        clock.now = 2.0 * step
        feed(1, step % 3, 0.6)
        feed(0, step, 1.0 + step)  # input 0 runs ahead, far past the window [0, 1)
    assert results.got == []  # input 1 still holds the watermark at 0.8
    assert counters.replay_skipped == 10
    feed(1, 3, 0.9)  # the replay has reached input 1's first new record: on time
    feed(1, 4, 2.5)
    assert results.got == [("k", 0.0, 5)]  # 0.5 and 0.6, 0.7, 0.8, 0.9
    assert output.topics == []  # nothing late
    assert not math.isinf(op.partitions[0].tracker.watermark())
