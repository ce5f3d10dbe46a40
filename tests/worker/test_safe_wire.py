"""Values the worker cannot carry safely go to the dead-letter topic, named, at encode time (no broker)."""

from __future__ import annotations

from typing import Any, cast

from confluent_kafka import Message

from cadenza.pipelines import Tumbling
from cadenza.pipelines.graph import NodeFunctions
from cadenza.schemas import ERROR_HEADER, ERROR_TYPE_HEADER
from cadenza.state import decode_key, decode_value
from cadenza.worker.engine.counters import WorkerCounters
from cadenza.worker.engine.dead_letter import OPERATOR_HEADER, DeadLetters
from cadenza.worker.engine.operators.base import Operator
from cadenza.worker.engine.operators.routing import KeyByOp
from cadenza.worker.engine.operators.window_step import WindowOp
from cadenza.worker.engine.unit import Unit
from cadenza.worker.engine.wire import decode_record_value
from tests.worker.recording_output import RecordingOutput


class _Message:
    def value(self) -> bytes:
        return b"raw"

    def key(self) -> bytes | None:
        return None

    def headers(self) -> None:
        return None


class _Nothing(Operator):
    def process(self, unit: Unit, key: Any, value: Any, event_time: float, window: Any) -> None:
        pass


class Opaque:
    pass


def _unit(offset: int, value: Any) -> Unit:
    return Unit("p", "src", "in", 0, offset, "k", value, 10.0, cast(Message, _Message()))


def _parts() -> tuple[RecordingOutput, DeadLetters, WorkerCounters]:
    out = RecordingOutput()
    counters = WorkerCounters()
    return out, DeadLetters("dead", "late", out.as_output(), counters), counters


def test_key_by_refuses_arbitrary_values_and_keys_naming_type_and_step() -> None:
    out, dead, counters = _parts()
    op = KeyByOp("rekey", lambda v: v["k"], "rep", output=out.as_output(), dead=dead)
    op.process(_unit(0, {"k": "a", "v": Opaque()}), "k", {"k": "a", "v": Opaque()}, 1.0, None)
    op.process(_unit(1, {"k": Opaque()}), "k", {"k": Opaque()}, 1.0, None)
    op.process(_unit(2, {"k": ("a", 1), "v": [1, 2.5]}), "k", {"k": ("a", 1), "v": [1, 2.5]}, 1.0, None)
    assert out.topics == ["dead", "dead", "rep"]
    for record in out.records[:2]:
        headers = record.headers
        error = headers[ERROR_HEADER].decode()
        assert "Opaque" in error and "'rekey'" in error
        assert headers[ERROR_TYPE_HEADER] == b"UnsupportedValue"
        assert headers[OPERATOR_HEADER] == b"rekey"
    value, key = out.records[2].value, out.records[2].key
    assert decode_record_value(value or b"") == {"k": ("a", 1), "v": [1, 2.5]}
    assert decode_key(key or b"") == ("a", 1)
    assert counters.dead_letter_function == 2


def test_window_refuses_accumulators_it_could_not_changelog() -> None:
    out, dead, counters = _parts()
    functions = NodeFunctions(
        init=lambda: [0, 0],
        add=lambda acc, v: [acc[0] + v, acc[1] + 1] if v >= 0 else Opaque(),
        result=lambda acc: acc,
    )
    op = WindowOp(
        "agg",
        Tumbling(60),
        functions,
        allowed_lateness=0.0,
        max_out_of_orderness=0.0,
        changelog_topic="cl",
        next=_Nothing("next"),
        dead=dead,
        counters=counters,
    )
    op.process(_unit(0, 5), "good", 5, 10.0, None)
    op.process(_unit(1, -1), "bad", -1, 10.0, None)
    op.process(_unit(2, 1), Opaque(), 1, 10.0, None)
    dead_records = [r for r in out.records if r.topic == "dead"]
    assert len(dead_records) == 2
    for headers in (r.headers for r in dead_records):
        error = headers[ERROR_HEADER].decode()
        assert "Opaque" in error and "'agg'" in error
        assert headers[OPERATOR_HEADER] == b"agg"
    ((_, writes),) = op.changelog_writes()  # the changelog holds only what it can carry
    state = {decode_key(k): decode_value(v) for k, v in writes[:-1] if v is not None}
    assert state == {"good": [[[0.0, 60.0, [5, 1]]], []]}


class _Collect(Operator):
    def __init__(self, node_id: str) -> None:
        super().__init__(node_id)
        self.seen: list[tuple[Any, Any]] = []

    def process(self, unit: Unit, key: Any, value: Any, event_time: float, window: Any) -> None:
        self.seen.append((key, value))


def test_a_raising_result_dead_letters_that_window_and_still_emits_the_others() -> None:
    out, dead, counters = _parts()

    def result(acc: int) -> int:
        if acc == 2:
            raise ValueError("two is unlucky")
        return acc

    functions = NodeFunctions(init=lambda: 0, add=lambda acc, v: acc + 1, result=result)
    collect = _Collect("next")
    op = WindowOp(
        "agg",
        Tumbling(10),
        functions,
        allowed_lateness=0.0,
        max_out_of_orderness=0.0,
        changelog_topic="cl",
        next=collect,
        dead=dead,
        counters=counters,
    )
    for offset, (key, t) in enumerate([("a", 1.0), ("b", 2.0), ("b", 3.0), ("c", 4.0), ("z", 25.0)]):
        op.process(_unit(offset, 1), key, 1, t, None)
    assert sorted(collect.seen) == [("a", 1), ("c", 1)]  # b's window (count 2) failed, the others closed
    dead_records = [r for r in out.records if r.topic == "dead"]
    assert len(dead_records) == 1
    assert "two is unlucky" in dead_records[0].headers[ERROR_HEADER].decode()
    op.process(_unit(5, 1), "z", 1, 40.0, None)  # the failed window is gone: never reported again
    assert len([r for r in out.records if r.topic == "dead"]) == 1
