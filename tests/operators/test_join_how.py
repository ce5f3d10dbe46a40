"""Inner, left and outer windowed joins against a brute force written here (no broker).

The watermark comes from a :class:`WatermarkTracker` on a virtual clock (so its idle timeout is
deterministic); records arrive with disorder, some of it beyond the declared out-of-orderness, so
some are late. The brute force decides lateness from the arrival order alone, pairs what is on time,
and lists each on-time record of an emitting side that has no partner. The join must emit exactly
that, and an unmatched record only once no partner can come any more.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cadenza.errors import ConfigError
from cadenza.operators import LEFT, RIGHT, WatermarkTracker, WindowedJoin
from cadenza.scheduling.clock import VirtualClock

WITHIN = 0.5
LATENESS = 0.25
DISORDER = 0.5

Event = tuple[int, str, float, int]  # side, key, event time, id
Result = tuple[str, int | None, int | None]  # key, left id, right id


def brute_force(events: list[Event], how: str) -> tuple[Counter[Result], set[int]]:
    watermark = -math.inf
    newest = -math.inf
    kept: list[Event] = []
    late: set[int] = set()
    for event in events:
        if event[2] + WITHIN + LATENESS <= watermark:
            late.add(event[3])
        else:
            kept.append(event)
        newest = max(newest, event[2])
        watermark = newest - DISORDER
    results: Counter[Result] = Counter()
    for left in kept:
        for right in kept:
            if (
                (left[0], right[0]) == (LEFT, RIGHT)
                and left[1] == right[1]
                and abs(left[2] - right[2]) <= WITHIN
            ):
                results[(left[1], left[3], right[3])] += 1
    emitting = {"inner": (), "left": (LEFT,), "outer": (LEFT, RIGHT)}[how]
    for event in kept:
        if event[0] not in emitting:
            continue
        partners = [
            other
            for other in kept
            if other[0] != event[0] and other[1] == event[1] and abs(other[2] - event[2]) <= WITHIN
        ]
        if not partners:
            results[(event[1], event[3], None) if event[0] == LEFT else (event[1], None, event[3])] += 1
    return results, late


def result_of(match: Any) -> Result:
    left = None if match.left is None else match.left["id"]
    right = None if match.right is None else match.right["id"]
    return (match.key, left, right)


def run(events: list[Event], how: str, restore_at: int | None = None) -> tuple[Counter[Result], set[int]]:
    clock = VirtualClock()
    tracker = WatermarkTracker([0], max_out_of_orderness=DISORDER, idle_timeout=60.0, clock=clock.now)
    join = WindowedJoin(WITHIN, LATENESS, how=how)  # type: ignore[arg-type]
    got: Counter[Result] = Counter()
    late: set[int] = set()
    for index, (side, key, t, ident) in enumerate(events):
        if index == restore_at:  # a restart: the state (as a changelog would restore it) in a new join
            watermark = join.watermark
            join = WindowedJoin(WITHIN, LATENESS, state=dict(join.state), how=how)  # type: ignore[arg-type]
            join.advance(watermark)
        clock.advance(0.01)
        matches, was_late = join.add(side, key, t, {"id": ident})
        if was_late is not None:
            late.add(ident)
        got.update(result_of(m) for m in matches)
        tracker.observe(0, t)
        join.advance(tracker.watermark())
        for unmatched in join.take_unmatched():
            # Emitted only once no partner can be on time any more: past the record's own window.
            assert unmatched.event_time + 2 * WITHIN + LATENESS <= join.watermark
            got[result_of(unmatched)] += 1
    join.advance(math.inf)  # the end of the input: every remaining record is final
    got.update(result_of(m) for m in join.take_unmatched())
    return got, late


times = st.integers(min_value=0, max_value=80).map(lambda i: i / 8)  # binary fractions: exact arithmetic
event_lists = st.lists(
    st.tuples(st.sampled_from([LEFT, RIGHT]), st.sampled_from(["a", "b", "c"]), times),
    min_size=1,
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(raw=event_lists, how=st.sampled_from(["inner", "left", "outer"]), data=st.data())
def test_join_results_equal_the_brute_force(raw: list[tuple[int, str, float]], how: str, data: Any) -> None:
    # Roughly rising times with local disorder: sort, then swap neighbours at random.
    rows = sorted(raw, key=lambda r: r[2])
    for i in range(len(rows) - 1):
        if data.draw(st.booleans()):
            rows[i], rows[i + 1] = rows[i + 1], rows[i]
    events = [(side, key, t, ident) for ident, (side, key, t) in enumerate(rows)]
    want, want_late = brute_force(events, how)
    got, late = run(events, how)
    assert late == want_late
    assert got == want
    restore_at = data.draw(st.integers(min_value=0, max_value=len(events)))
    assert run(events, how, restore_at=restore_at) == (want, want_late)


def test_a_record_that_matches_late_in_event_time_never_also_comes_out_unmatched() -> None:
    join = WindowedJoin(1.0, 0.0, how="outer")
    join.add(LEFT, "k", 10.0, "l")
    join.advance(10.5)  # the left record's own window [9, 11] is still open
    join.advance(11.0)  # now closed: but a right record at 11 would still be on time
    assert join.take_unmatched() == []
    matches, late = join.add(RIGHT, "k", 11.0, "r")
    assert late is None
    assert [(m.left, m.right) for m in matches] == [("l", "r")]
    join.advance(math.inf)
    assert join.take_unmatched() == []


def test_unknown_how_is_refused() -> None:
    with pytest.raises(ConfigError, match="'inner', 'left' or 'outer'"):
        WindowedJoin(1.0, how="full")  # type: ignore[arg-type]


def test_what_take_unmatched_returns_is_the_callers_even_when_empty() -> None:
    join = WindowedJoin(1.0, 0.0, how="left")
    join.add(LEFT, "k", 0.0, "l")
    kept = join.take_unmatched()  # nothing yet; a caller may hold on to this list
    join.advance(10.0)
    assert kept == []
    assert [(m.left, m.right) for m in join.take_unmatched()] == [("l", None)]
