"""Window results and late records are a function of the input, not of the arrival interleaving.

The invariant behind issue 14, on the event-time operators alone (a virtual clock, no broker): the
same per-partition input, each partition in order with disorder inside the declared out-of-orderness,
delivered under any interleaving of the partitions (one far ahead, one starting late, ...), with or
without a restart from saved state in the middle, yields no late record and exactly the windows a
brute force computes from the whole input for the final watermark.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Hashable

from hypothesis import given, settings
from hypothesis import strategies as st

from cadenza.operators import (
    Aggregate,
    HoppingWindows,
    SessionWindows,
    SlidingWindows,
    TumblingWindows,
    WatermarkTracker,
    WindowAssigner,
    WindowedAggregation,
)
from cadenza.scheduling.clock import VirtualClock
from tests.operators.window_oracle import Expected, expected_windows

OOO = 5
LATENESS = 1
SIZE, HOP, GAP = 10, 4, 3
IDLE_TIMEOUT = 30.0

Row = tuple[str, int, int]  # key, event time, value


def _sum() -> Aggregate[int, int, int]:
    return Aggregate(lambda: 0, lambda acc, value: acc + value, lambda a, b: a + b, lambda acc: acc)


def _assigner(kind: str) -> WindowAssigner:
    assigners: dict[str, WindowAssigner] = {
        "tumbling": TumblingWindows(SIZE),
        "hopping": HoppingWindows(SIZE, HOP),
        "sliding": SlidingWindows(SIZE),
        "session": SessionWindows(GAP),
    }
    return assigners[kind]


@st.composite
def partition_rows(draw: st.DrawFn) -> list[Row]:
    """One partition's records in offset order; each is less than OOO behind the largest before it."""
    rows: list[Row] = []
    start = draw(st.integers(0, 40))
    largest = start
    for _ in range(draw(st.integers(1, 25))):
        t = draw(st.integers(largest - OOO + 1, largest + 6))
        largest = max(largest, t)
        rows.append((draw(st.sampled_from("abc")), t, draw(st.integers(1, 9))))
    return rows


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list[list[Row]], list[int], int | None, list[float]]:
    partitions = draw(st.lists(partition_rows(), min_size=2, max_size=4))
    order = draw(st.permutations([p for p, rows in enumerate(partitions) for _ in rows]))
    restart = draw(st.none() | st.integers(0, len(order) - 1))
    # Virtual seconds between deliveries: in all, well inside the idle timeout.
    pauses = draw(st.lists(st.floats(0.0, 0.2), min_size=len(order), max_size=len(order)))
    return partitions, order, restart, pauses


def run(
    kind: str, partitions: list[list[Row]], order: list[int], restart: int | None, pauses: list[float]
) -> tuple[set[Expected], list[tuple[Hashable, float]], list[Expected]]:
    """Feed the records in ``order`` (partition ids), restarting from saved state before ``restart``."""
    clock = VirtualClock(100.0)
    inputs = range(len(partitions))

    def fresh(
        state: dict[object, object], event_times: dict[int, float], watermark: float
    ) -> tuple[WatermarkTracker, WindowedAggregation[str, int, int, int], list[Expected]]:
        tracker = WatermarkTracker(
            inputs, max_out_of_orderness=OOO, idle_timeout=IDLE_TIMEOUT, clock=clock.now
        )
        for partition, t in event_times.items():
            tracker.observe(partition, t)
        aggregation: WindowedAggregation[str, int, int, int] = WindowedAggregation(
            _assigner(kind), _sum(), LATENESS, state=state
        )
        closed = aggregation.advance(max(watermark, tracker.watermark()))
        return tracker, aggregation, [(r.key, r.window.start, r.window.end, r.result) for r in closed]

    event_times: dict[int, float] = {}
    tracker, aggregation, emitted = fresh({}, event_times, -math.inf)
    late: list[tuple[Hashable, float]] = []
    positions = [0] * len(partitions)
    for index, partition in enumerate(order):
        if index == restart:  # what the changelog keeps: state, event time per input, the watermark
            saved = copy.deepcopy(dict(aggregation.state))
            tracker, aggregation, reemitted = fresh(saved, dict(event_times), aggregation.watermark)
            emitted.extend(reemitted)
        key, t, value = partitions[partition][positions[partition]]
        positions[partition] += 1
        late.extend((miss.key, miss.event_time) for miss in aggregation.add(key, t, value))
        tracker.observe(partition, t)
        event_times[partition] = max(event_times.get(partition, -math.inf), t)
        for result in aggregation.advance(tracker.watermark()):
            emitted.append((result.key, result.window.start, result.window.end, result.result))
        clock.advance(pauses[index])
    return set(emitted), late, emitted


@settings(max_examples=60, deadline=None)
@given(kind=st.sampled_from(["tumbling", "hopping", "sliding", "session"]), scenario=scenarios())
def test_any_interleaving_and_restart_gives_the_brute_force_windows_and_nothing_late(
    kind: str, scenario: tuple[list[list[Row]], list[int], int | None, list[float]]
) -> None:
    partitions, order, restart, pauses = scenario
    results, late, emitted = run(kind, partitions, order, restart, pauses)
    final = min(max(t for _, t, _ in rows) for rows in partitions) - OOO
    every = [row for rows in partitions for row in rows]
    assert late == []
    assert len(emitted) == len(results), "a window was emitted twice"
    assert results == expected_windows(
        kind, every, size=SIZE, hop=HOP, gap=GAP, watermark=final, lateness=LATENESS
    )
    # The same input partition by partition (a backlog read one partition after the other).
    backlog = [p for p, rows in enumerate(partitions) for _ in rows]
    assert run(kind, partitions, backlog, None, [0.0] * len(backlog))[:2] == (results, late)


def test_a_tracker_told_its_inputs_holds_back_for_one_that_has_not_delivered() -> None:
    """What went wrong before: inputs learnt from records let the first partition close windows."""
    told = WatermarkTracker([0, 1], max_out_of_orderness=OOO)
    learning = WatermarkTracker(max_out_of_orderness=OOO)
    for tracker in (told, learning):
        tracker.observe(0, 100)
    assert told.watermark() == -math.inf
    assert learning.watermark() == 100 - OOO


def test_idle_timeout_reports_each_silence_once() -> None:
    clock = VirtualClock(0.0)
    fired: list[Hashable] = []
    tracker = WatermarkTracker([0, 1], idle_timeout=10.0, clock=clock.now, on_idle=fired.append)
    tracker.observe(0, 50)
    clock.advance(5)
    assert tracker.watermark() == -math.inf and fired == []
    clock.advance(5)
    tracker.observe(0, 60)
    assert tracker.watermark() == 60  # partition 1 timed out: it no longer holds the watermark back
    assert tracker.watermark() == 60
    assert fired == [1]
    tracker.observe(1, 61)  # rejoins; a second silence is a second firing
    clock.advance(10)
    tracker.observe(0, 70)
    tracker.watermark()
    assert fired == [1, 1]
