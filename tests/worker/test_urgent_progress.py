"""When a key_by sends its progress records: on the interval, and early when an input partition has
just moved past the next window close downstream. What the records say does not change."""

from __future__ import annotations

from typing import Any, cast

import pytest
from confluent_kafka import Message

from cadenza.pipelines import Tumbling
from cadenza.pipelines.graph import NodeFunctions
from cadenza.worker.context_stamps import first_close_after
from cadenza.worker.counters import WorkerCounters
from cadenza.worker.dead_letter import DeadLetters
from cadenza.worker.operators.base import Operator
from cadenza.worker.operators.routing import URGENT_PROGRESS_SHARE, KeyByOp, progress_due
from cadenza.worker.operators.window_step import WindowOp
from cadenza.worker.output import Output
from cadenza.worker.unit import Unit
from cadenza.worker.wire import PROGRESS_HEADER, unpack_progress


class _Output:
    def __init__(self) -> None:
        self.records: list[tuple[str, int, dict[str, bytes]]] = []
        self.producer = self

    def produce(
        self, topic: str, value: bytes | None, key: bytes | None, headers: Any = None, partition: int = -1
    ) -> None:
        self.records.append((topic, partition, dict(headers or [])))


class _Nothing(Operator):
    def process(self, unit: Unit, key: Any, value: Any, event_time: float, window: Any) -> None:
        pass


def _window(size: float, out_of_orderness: float, output: _Output) -> WindowOp:
    counters = WorkerCounters()
    return WindowOp(
        "count",
        Tumbling(size),
        NodeFunctions(init=lambda: 0, add=lambda acc, v: acc + 1, result=lambda acc: acc),
        allowed_lateness=0.0,
        max_out_of_orderness=out_of_orderness,
        changelog_topic="cl",
        next=_Nothing("next"),
        dead=DeadLetters("dead", "late", cast(Output, output), counters),
        counters=counters,
    )


def _key_by(output: _Output, partitions: int) -> KeyByOp:
    return KeyByOp(
        "rekey",
        lambda value: value,
        "rep",
        output=cast(Output, output),
        dead=DeadLetters("dead", "late", cast(Output, output), WorkerCounters()),
        partitions=partitions,
    )


def _urgent(op: KeyByOp) -> bool:
    """Read through a call: the flag changes under the calls between two asserts."""
    return op.urgent


def _unit(partition: int, offset: int, event_time: float) -> Unit:
    return Unit("p", "rekey", "in", partition, offset, None, "k", event_time, cast(Message, None))


def test_progress_is_due_on_the_interval_or_early_when_urgent() -> None:
    output = _Output()
    calm, hurried = _key_by(output, 2), _key_by(output, 2)
    hurried.urgent = True
    interval = 0.05
    assert not progress_due([calm], 0.049, interval)
    assert progress_due([calm], 0.05, interval)
    assert progress_due([calm, hurried], interval * URGENT_PROGRESS_SHARE, interval)
    assert not progress_due([calm, hurried], interval * URGENT_PROGRESS_SHARE * 0.99, interval)
    assert not progress_due([], 0.0, interval)


def test_first_close_after_is_strictly_later_than_the_event_time() -> None:
    release = first_close_after(_window(1.0, 0.05, _Output()))
    assert release(0.3) == pytest.approx(1.05)
    assert release(1.04) == pytest.approx(1.05)
    assert release(1.05) == pytest.approx(2.05)  # at the close itself: that window is released
    assert release(1.5) == pytest.approx(2.05)


def test_a_record_past_the_next_close_makes_the_key_by_urgent_and_the_broadcast_calms_it() -> None:
    output = _Output()
    op = _key_by(output, partitions=3)
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
        for _, partition, headers in output.records
        if PROGRESS_HEADER in headers
    )
    # The same records a timer-driven broadcast would send: each input's largest event time, to
    # every partition of the topic.
    assert sent == sorted((p, upstream, t) for p in range(3) for upstream, t in ((0, 1.04), (1, 1.06)))
    # Nothing grew: not urgent, nothing sent.
    op.process(_unit(1, 2, 1.0), "b", "b", 1.0, None)
    assert not _urgent(op) and op.broadcast_progress() == 0


def test_without_a_window_downstream_progress_follows_the_interval_only() -> None:
    output = _Output()
    op = _key_by(output, partitions=2)
    op.process(_unit(0, 0, 0.2), "a", "a", 0.2, None)
    op.broadcast_progress()
    op.process(_unit(0, 1, 50.0), "a", "a", 50.0, None)
    assert not _urgent(op)
