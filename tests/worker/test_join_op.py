"""The join step's partition bookkeeping and refusals, without a broker."""

from __future__ import annotations

from typing import Any

from confluent_kafka import Message

from cadenza.state import InMemoryStateStore, Position
from cadenza.worker.engine.counters import WorkerCounters
from cadenza.worker.engine.dead_letter import OPERATOR_HEADER, DeadLetters
from cadenza.worker.engine.operators.base import Operator
from cadenza.worker.engine.operators.join_step import JoinOp
from cadenza.worker.engine.unit import Unit
from tests.worker.recording_output import RecordingOutput


class _Collect(Operator):
    def __init__(self) -> None:
        super().__init__("collect")
        self.got: list[tuple[Any, Any, float]] = []

    def process(self, unit: Unit, key: Any, value: Any, event_time: float, window: Any) -> None:
        self.got.append((key, value, event_time))


class Opaque:
    pass


def make() -> tuple[JoinOp, _Collect, RecordingOutput, InMemoryStateStore]:
    """Only dead letters and late records are written to the output here."""
    out, store, sink = RecordingOutput(), InMemoryStateStore(), _Collect()
    counters = WorkerCounters()
    dead = DeadLetters("p.dlq", "p.late", out.as_output(), counters)
    join = JoinOp(
        "5-join",
        within=1.0,
        allowed_lateness=0.0,
        on=None,
        max_out_of_orderness=0.0,
        changelog_topic="p.5-join.changelog",
        next=sink,
        dead=dead,
        counters=counters,
        store=store,
    )
    return join, sink, out, store


def unit(topic: str, offset: int, key: Any, value: Any, t: float) -> Unit:
    message = Message(topic=topic, partition=0, offset=offset, key=None, value=b"v", headers=None)
    return Unit("p", "entry", topic, 0, offset, key, value, t, message)


def feed(join: JoinOp, side: int, u: Unit) -> None:
    join.inputs[side].process(u, u.key, u.value, u.event_time, None)


def test_matches_flow_downstream_and_the_watermark_waits_for_both_sides() -> None:
    join, sink, out, _ = make()
    for offset, t in enumerate((1.0, 5.0, 9.0)):
        feed(join, 0, unit("left", offset, "k", f"l{offset}", t))
    # The right side has not delivered: its placeholder holds the watermark, so nothing expired yet.
    assert join.partitions[0].join.watermark == float("-inf")
    feed(join, 1, unit("right", 0, "k", "r0", 1.5))
    assert sink.got == [("k", ("l0", "r0"), 1.5)]
    assert not out.records


def test_values_that_cannot_be_changelogged_are_dead_lettered_not_stored() -> None:
    join, sink, out, store = make()
    feed(join, 0, unit("left", 0, "k", Opaque(), 1.0))
    assert out.topics == ["p.dlq"]
    assert out.records[0].headers[OPERATOR_HEADER] == b"5-join"
    assert store.size(0) == 0 and not sink.got


def test_state_survives_one_side_leaving_and_goes_when_both_have() -> None:
    join, _, _, store = make()
    left, right = join.inputs
    left.restore(0, {}, None)
    right.restore(0, {}, None)
    feed(join, 0, unit("left", 0, "k", "l0", 1.0))
    writes = left.changelog_writes()
    assert writes and writes[0][0] == 0 and right.changelog_writes() == []  # written once, by either
    left.drop(0)
    assert store.size(0) == 1  # the right side is still here and its records need this state
    left.restore(0, {"ignored": [[], []]}, Position(offset=-1))  # back: the live state is newer
    assert store.get(0, "ignored") is None and store.size(0) == 1
    left.drop(0)
    right.drop(0)
    assert store.size(0) == 0 and 0 not in join.partitions


def test_replayed_input_below_the_restored_position_is_skipped_per_side() -> None:
    join, sink, _, _ = make()
    join.inputs[0].restore(0, {"k": [[[1.0, "l0"]], []]}, Position(offset=-1, inputs={0: 5, 1: 2}))
    feed(join, 0, unit("left", 4, "k", "l-old", 1.0))  # already in the state
    feed(join, 1, unit("right", 1, "k", "r-old", 1.0))
    assert not sink.got and join.counters.replay_skipped == 2
    feed(join, 1, unit("right", 2, "k", "r2", 1.25))
    assert sink.got == [("k", ("l0", "r2"), 1.25)]
