"""A window run with lessees (LiftedWindowOp fed Lifted records) does exactly what the plain WindowOp
does: the same results in the same order, the same late and dead-letter records, the same changelog.

The lessees are played here by calling :class:`~cadenza.operators.Lift` in place, as the runtime
would hand over its outcome: ``Lifted(value, partial)``, or ``Lifted(value, LiftFailure(error))``
when the lift raised. The inputs are random keyed records in offset order with event times out of
order (so some are late), including values whose ``add`` raises (13) and, for min/max, values with
no item (7: the extractor returns ``None``); batch ends drain the changelog, and restores rebuild
each operator from the *other* one's changelog (a step whose ``parallel`` changed between runs) and
re-deliver records the state already holds.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, cast

import pytest
from confluent_kafka import Message
from hypothesis import given, settings
from hypothesis import strategies as st

from cadenza.errors import ConfigError
from cadenza.operators import Count, Lift, Lifted, LiftFailure, Max, Mean, Min, Sum, Window, aggregate
from cadenza.pipelines import Hopping, Session, Sliding, Tumbling
from cadenza.pipelines.graph import NodeFunctions
from cadenza.schemas import ERROR_HEADER
from cadenza.state import ChangelogReplay
from cadenza.worker.engine.counters import WorkerCounters
from cadenza.worker.engine.dead_letter import DeadLetters
from cadenza.worker.engine.operators.base import Operator
from cadenza.worker.engine.operators.window_step import LiftedWindowOp, WindowOp
from cadenza.worker.engine.unit import Unit
from tests.worker.recording_output import Produced, RecordingOutput

RAISES, NO_ITEM = 13, 7


def item(value: dict[str, int]) -> Any:
    """The built-ins' extractor: raises for one value, has no item for another (None)."""
    v = value["v"]
    if v == RAISES:
        raise ValueError(f"cannot read {v}")
    return None if v == NO_ITEM else v


def _add_value(acc: list[int], value: dict[str, int]) -> list[int]:
    if value["v"] == RAISES:
        raise ValueError(f"cannot add {value['v']}")
    return sorted([*acc, value["v"]])


def _merge_values(a: list[int], b: list[int]) -> list[int]:
    return sorted(a + b)


def functions_of(name: str) -> NodeFunctions:
    if name == "values":  # a user aggregate keeping the multiset, so membership is compared, not a number
        agg: Any = aggregate(list, _add_value, _merge_values)
    else:
        agg = {"count": Count(), "sum": Sum(item), "min": Min(item), "max": Max(item), "mean": Mean(item)}[
            name
        ]
    return NodeFunctions(init=agg.init, add=agg.add, merge=agg.merge, result=agg.result)


AGGREGATIONS = ["count", "sum", "min", "max", "mean", "values"]
SPECS: list[Tumbling | Hopping | Sliding | Session] = [
    Tumbling(1.0),
    Tumbling(2.5),
    Hopping(4.0, 1.0),
    Hopping(3.0, 2.0),
    Sliding(1.0),
    Sliding(3.0),
    Session(0.5),
    Session(2.0),
]


class _Message:
    def __init__(self, value: bytes) -> None:
        self._value = value

    def value(self) -> bytes:
        return self._value

    def key(self) -> bytes | None:
        return None

    def headers(self) -> None:
        return None


class _Results(Operator):
    def __init__(self) -> None:
        super().__init__("results")
        self.got: list[tuple[Any, Window | None, Any, float]] = []

    def process(self, unit: Unit, key: Any, value: Any, event_time: float, window: Window | None) -> None:
        self.got.append((key, window, json.dumps(value), event_time))


@dataclass
class Side:
    """One operator and everything it produced."""

    op: WindowOp
    results: _Results
    output: RecordingOutput
    counters: WorkerCounters
    replay: ChangelogReplay
    writes: list[dict[bytes, bytes | None]]


def side(kind: type[WindowOp], spec: Any, name: str, lateness: float, disorder: float) -> Side:
    results, output, counters = _Results(), RecordingOutput(), WorkerCounters()
    op = kind(
        "4-agg",
        spec,
        functions_of(name),
        allowed_lateness=lateness,
        max_out_of_orderness=disorder,
        changelog_topic="cl",
        next=results,
        dead=DeadLetters("dead", "late", output.as_output(), counters),
        counters=counters,
    )
    return Side(op, results, output, counters, ChangelogReplay(), [])


def lift_of(functions: NodeFunctions) -> Lift[Any, Any]:
    """What the step builder hands the lessees, from the node's functions."""
    assert functions.init is not None and functions.add is not None
    return Lift(functions.init, functions.add)


def lifted(lift: Lift[Any, Any], value: Any) -> Lifted:
    """What the runtime hands the lifted window for a lessee's outcome."""
    try:
        return Lifted(value, lift(value))
    except Exception as exc:
        return Lifted(value, LiftFailure(exc))


def unit(offset: int, key: str, value: Any, t: float) -> Unit:
    return Unit(
        "p", "2-key_by", "in", 0, offset, key, value, t, cast(Message, _Message(json.dumps(value).encode()))
    )


def drain(s: Side) -> None:
    batch: dict[bytes, bytes | None] = {}
    for partition, writes in s.op.changelog_writes():
        assert partition == 0
        for key, value in writes:
            s.replay.apply(key, value)
            batch[key] = value
    s.writes.append(batch)


def restore(s: Side, replay: ChangelogReplay) -> None:
    s.op.restore(0, replay.entries(), replay.position)


def produced(s: Side) -> list[Produced]:
    return s.output.records


@dataclass(frozen=True)
class Rec:
    key: str
    t: float
    v: int


@dataclass(frozen=True)
class Batch:
    pass


@dataclass(frozen=True)
class Restore:
    """Drain, restore each side from the other's changelog, and re-deliver the last records."""

    redeliver: int


RECORDS = st.builds(
    Rec, key=st.sampled_from("ab"), t=st.integers(0, 80).map(lambda n: n / 4), v=st.integers(0, 15)
)
OPS = st.lists(
    st.one_of(RECORDS, RECORDS, RECORDS, RECORDS, st.just(Batch()), st.builds(Restore, st.integers(0, 3))),
    min_size=1,
    max_size=50,
)


def run(plain: Side, lift: Side, ops: list[Any], functions: NodeFunctions) -> None:
    to_lessee = lift_of(functions)
    fed: list[tuple[int, Rec]] = []
    for op in ops:
        if isinstance(op, Rec):
            offset, value = len(fed), {"v": op.v}
            fed.append((offset, op))
            plain.op.process(unit(offset, op.key, value, op.t), op.key, value, op.t, None)
            lift.op.process(unit(offset, op.key, value, op.t), op.key, lifted(to_lessee, value), op.t, None)
        else:
            drain(plain)
            drain(lift)
            if isinstance(op, Restore):
                plain_replay, lift_replay = plain.replay, lift.replay
                restore(plain, lift_replay)
                restore(lift, plain_replay)
                for offset, rec in fed[len(fed) - op.redeliver :]:  # below the restored position: skipped
                    value = {"v": rec.v}
                    plain.op.process(unit(offset, rec.key, value, rec.t), rec.key, value, rec.t, None)
                    lift.op.process(
                        unit(offset, rec.key, value, rec.t), rec.key, lifted(to_lessee, value), rec.t, None
                    )
    drain(plain)
    drain(lift)


def assert_same(plain: Side, lift: Side) -> None:
    assert lift.results.got == plain.results.got
    assert produced(lift) == produced(plain)
    assert lift.writes == plain.writes
    assert lift.counters.snapshot() == plain.counters.snapshot()


@pytest.mark.parametrize("name", AGGREGATIONS)
@settings(max_examples=150, deadline=None)
@given(
    ops=OPS,
    spec=st.sampled_from(SPECS),
    lateness=st.sampled_from([0.0, 1.0, 2.5]),
    disorder=st.sampled_from([0.0, 1.5]),
)
def test_a_lifted_window_does_exactly_what_the_plain_one_does(
    name: str, ops: list[Any], spec: Any, lateness: float, disorder: float
) -> None:
    plain = side(WindowOp, spec, name, lateness, disorder)
    lift = side(LiftedWindowOp, spec, name, lateness, disorder)
    run(plain, lift, ops, functions_of(name))
    assert_same(plain, lift)


@pytest.mark.parametrize("spec", SPECS, ids=lambda spec: spec.describe())
def test_late_records_dead_letters_and_state_are_the_plain_ones_on_a_fixed_run(spec: Any) -> None:
    """One run that has every case at once, so a regression shows without hypothesis's luck: late
    records (the late topic shows the record, not its partial), a failed lift late for all its
    windows (late topic, as ``add`` is never called), a failed lift on time (dead letter), a result."""
    plain = side(WindowOp, spec, "sum", 0.0, 0.0)
    lift = side(LiftedWindowOp, spec, "sum", 0.0, 0.0)
    ops: list[Rec | Batch | Restore] = [
        Rec("a", 10.0, 1),
        Rec("a", 10.5, 2),
        Rec("a", 20.0, 3),
        Rec("a", 10.25, 4),
    ]
    ops += [Rec("a", 10.0, RAISES), Rec("a", 20.5, RAISES), Rec("b", 30.0, 5), Batch(), Restore(2)]
    ops += [Rec("a", 40.0, 6)]
    run(plain, lift, ops, functions_of("sum"))
    assert_same(plain, lift)
    topics = [record.topic for record in produced(lift)]
    assert "late" in topics and "dead" in topics and lift.results.got
    late_values = {record.value for record in produced(lift) if record.topic == "late"}
    assert b'{"v":4}' in late_values and b'{"v":13}' in late_values
    (failed,) = [record for record in produced(lift) if record.topic == "dead"]
    assert failed.headers[ERROR_HEADER].startswith(b"ValueError: cannot read 13")


def test_a_lifted_window_needs_merge_and_says_which_step() -> None:
    functions = NodeFunctions(init=lambda: 0, add=lambda acc, v: acc + v, result=lambda acc: acc)
    with pytest.raises(ConfigError, match=r"step '4-agg'.*needs a merge function"):
        side_with(functions)


def side_with(functions: NodeFunctions) -> LiftedWindowOp:
    counters = WorkerCounters()
    return LiftedWindowOp(
        "4-agg",
        Tumbling(1.0),
        functions,
        allowed_lateness=0.0,
        max_out_of_orderness=0.0,
        changelog_topic="cl",
        next=_Results(),
        dead=DeadLetters("dead", "late", RecordingOutput().as_output(), counters),
        counters=counters,
    )
