"""WindowedAggregation against a brute-force computation, for every window kind.

The reference below is written from the documented semantics only, the plain way: it sees the whole
run at once, decides which records each window accepted (a record is accepted into a window when
that window was still open at the record's arrival: ``end + lateness > watermark then``), builds
each window's content as a list, and says at which ``advance`` call the window must come out (the
first one whose watermark reaches ``end + lateness``). It never folds incrementally, merges sessions
or prunes anything.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cadenza.operators import (
    Aggregator,
    Count,
    HoppingWindows,
    Late,
    Max,
    Mean,
    Min,
    SessionWindows,
    SlidingWindows,
    Sum,
    TumblingWindows,
    Window,
    WindowAssigner,
    WindowedAggregation,
    aggregate,
)

# -- operations ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rec:
    key: str
    t: float
    v: int


@dataclass(frozen=True)
class Adv:
    w: float


@dataclass(frozen=True)
class Restore:
    """Rebuild the aggregation from its state after a trip through JSON, as a changelog restore would."""


Op = Rec | Adv | Restore

# Quarter seconds: exact in binary floating point, so window boundaries are exact too.
QUARTERS = st.integers(0, 240).map(lambda n: n / 4)
RECORDS = st.builds(Rec, key=st.sampled_from("abc"), t=QUARTERS, v=st.integers(-5, 5))
ADVANCES = st.builds(Adv, w=st.integers(-20, 300).map(lambda n: n / 4))
OPS = st.lists(st.one_of(RECORDS, RECORDS, RECORDS, ADVANCES, st.just(Restore())), min_size=1, max_size=60)
LATENESS = st.sampled_from([0.0, 1.0, 2.5])

ASSIGNERS: list[WindowAssigner] = [
    TumblingWindows(1),
    TumblingWindows(2.5),
    TumblingWindows(10),
    HoppingWindows(10, 5),
    HoppingWindows(10, 2.5),
    HoppingWindows(6, 4),
    HoppingWindows(3, 5),  # gaps between windows
    SlidingWindows(0.5),
    SlidingWindows(2),
    SlidingWindows(5),
    SessionWindows(0.5),
    SessionWindows(1),
    SessionWindows(3),
]


def values_aggregator() -> Aggregator[int, Any, tuple[int, ...]]:
    """Keeps the multiset of values, so the comparison checks membership, not just a number."""
    return aggregate(list, lambda acc, v: sorted([*acc, v]), lambda a, b: sorted(a + b), tuple)


AGGREGATORS: dict[str, tuple[Any, Any]] = {
    "values": (values_aggregator, lambda xs: tuple(sorted(xs))),
    "count": (Count, len),
    "sum": (Sum, sum),
    "min": (Min, min),
    "max": (Max, max),
    "mean": (Mean, lambda xs: sum(xs) / len(xs)),
}


class JsonStore(MutableMapping[Any, Any]):
    """A store that keeps only serialized bytes, like a changelogged one: no aliasing survives."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self.writes = 0

    def __getitem__(self, key: Any) -> Any:
        return json.loads(self.data[key])

    def __setitem__(self, key: Any, value: Any) -> None:
        self.writes += 1
        self.data[key] = json.dumps(value).encode()

    def __delitem__(self, key: Any) -> None:
        del self.data[key]

    def __iter__(self) -> Iterator[Any]:
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)


# -- the reference ---------------------------------------------------------------------------------


def windows_containing(assigner: WindowAssigner, t: float) -> list[Window]:
    """Tumbling and hopping windows holding t, by enumerating every aligned start in range."""
    if isinstance(assigner, TumblingWindows):
        size, hop = assigner.size, assigner.size
    else:
        assert isinstance(assigner, HoppingWindows)
        size, hop = assigner.size, assigner.hop
    starts = (k * hop for k in range(-100, 1000))
    return [Window(s, s + size) for s in starts if s <= t < s + size]


def reference(
    assigner: WindowAssigner, lateness: float, ops: list[Op], result: Any
) -> tuple[list[list[tuple[Any, ...]]], list[list[Late]]]:
    """Per advance call, the sorted (key, window, result) it must return; per record, its Late list."""
    # Watermark at each record's arrival, and the running watermark after each advance.
    arrivals: list[tuple[Rec, float]] = []
    advance_marks: list[float] = []
    current = -math.inf
    for op in ops:
        if isinstance(op, Rec):
            arrivals.append((op, current))
        elif isinstance(op, Adv):
            current = max(current, op.w)
            advance_marks.append(current)

    contents: dict[tuple[str, Window], list[int]] = defaultdict(list)
    lates: list[list[Late]] = []

    if isinstance(assigner, TumblingWindows | HoppingWindows):
        for rec, mark in arrivals:
            late = []
            for window in windows_containing(assigner, rec.t):
                if window.end + lateness > mark:
                    contents[(rec.key, window)].append(rec.v)
                else:
                    late.append(Late(rec.key, rec.t, window))
            lates.append(late)

    elif isinstance(assigner, SlidingWindows):
        size = assigner.size
        creators = {(rec.key, rec.t) for rec, mark in arrivals if rec.t + lateness > mark}
        for key, end in creators:
            for rec, mark in arrivals:
                if rec.key == key and end - size <= rec.t <= end and end + lateness > mark:
                    contents[(key, Window(end - size, end))].append(rec.v)
        lates = [
            [Late(rec.key, rec.t, Window(rec.t - size, rec.t))] if rec.t + lateness <= mark else []
            for rec, mark in arrivals
        ]

    else:
        assert isinstance(assigner, SessionWindows)
        gap = assigner.gap
        accepted: dict[str, list[Rec]] = defaultdict(list)
        for rec, mark in arrivals:
            if rec.t + lateness > mark:
                accepted[rec.key].append(rec)
                lates.append([])
            else:
                lates.append([Late(rec.key, rec.t, Window(rec.t, rec.t + gap))])
        for key, recs in accepted.items():
            recs.sort(key=lambda r: r.t)
            groups: list[list[Rec]] = [[recs[0]]]
            for rec in recs[1:]:
                if rec.t - groups[-1][-1].t <= gap:
                    groups[-1].append(rec)
                else:
                    groups.append([rec])
            for group in groups:
                contents[(key, Window(group[0].t, group[-1].t + gap))] = [r.v for r in group]

    emitted: list[list[tuple[Any, ...]]] = [[] for _ in advance_marks]
    for (key, window), values in contents.items():
        for index, mark in enumerate(advance_marks):
            if window.end + lateness <= mark:
                emitted[index].append((key, window, result(values)))
                break
    return [sorted(batch) for batch in emitted], lates


# -- the comparison --------------------------------------------------------------------------------


def run(
    assigner: WindowAssigner, lateness: float, ops: list[Op], make_agg: Any, store: str
) -> tuple[list[list[tuple[Any, ...]]], list[list[Late]], WindowedAggregation[Any, Any, Any, Any]]:
    state: MutableMapping[Any, Any] = JsonStore() if store == "json" else {}
    agg: WindowedAggregation[Any, Any, Any, Any] = WindowedAggregation(assigner, make_agg(), lateness, state)
    emitted: list[list[tuple[Any, ...]]] = []
    lates: list[list[Late]] = []
    for op in ops:
        if isinstance(op, Rec):
            lates.append(agg.add(op.key, op.t, op.v))
        elif isinstance(op, Adv):
            out = agg.advance(op.w)
            closes = [r.window.end for r in out]
            assert closes == sorted(closes), "results come out by closing time"
            emitted.append(sorted((r.key, r.window, r.result) for r in out))
        else:
            restored = json.loads(json.dumps(list(agg.state.items())))
            new_state: MutableMapping[Any, Any] = JsonStore() if store == "json" else {}
            new_state.update((key, value) for key, value in restored)
            watermark = agg.watermark
            agg = WindowedAggregation(assigner, make_agg(), lateness, new_state)
            assert agg.advance(watermark) == []
    return emitted, lates, agg


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    assigner=st.sampled_from(ASSIGNERS),
    lateness=LATENESS,
    ops=OPS,
    aggregator=st.sampled_from(sorted(AGGREGATORS)),
    store=st.sampled_from(["dict", "json"]),
)
def test_matches_brute_force(
    assigner: WindowAssigner, lateness: float, ops: list[Op], aggregator: str, store: str
) -> None:
    ops = [*ops, Adv(math.inf)]  # the end of the stream closes everything
    make_agg, plain = AGGREGATORS[aggregator]
    emitted, lates, agg = run(assigner, lateness, ops, make_agg, store)
    expected_emitted, expected_lates = reference(assigner, lateness, ops, plain)
    assert lates == expected_lates
    assert emitted == expected_emitted
    assert len(agg.state) == 0, "nothing is left behind once every window closed"


COARSE_RECORDS = st.builds(
    Rec, key=st.sampled_from("ab"), t=st.integers(0, 20).map(float), v=st.integers(-5, 5)
)
COARSE_OPS = st.lists(st.one_of(COARSE_RECORDS, COARSE_RECORDS, ADVANCES), min_size=1, max_size=40)


@settings(max_examples=150, deadline=None)
@given(ops=COARSE_OPS, gap=st.sampled_from([1.0, 2.0]), lateness=LATENESS)
def test_sessions_on_whole_seconds_match_brute_force(ops: list[Op], gap: float, lateness: float) -> None:
    """Whole-second times make records exactly ``gap`` apart common: they must share a session."""
    ops = [*ops, Adv(math.inf)]
    assigner = SessionWindows(gap)
    emitted, lates, _ = run(assigner, lateness, ops, values_aggregator, "dict")
    assert (emitted, lates) == reference(assigner, lateness, ops, lambda xs: tuple(sorted(xs)))


@pytest.mark.parametrize("assigner", ASSIGNERS, ids=repr)
@settings(max_examples=40, deadline=None)
@given(ops=OPS, lateness=LATENESS)
def test_each_kind_matches_brute_force(assigner: WindowAssigner, ops: list[Op], lateness: float) -> None:
    ops = [*ops, Adv(math.inf)]
    emitted, lates, _ = run(assigner, lateness, ops, values_aggregator, "dict")
    assert (emitted, lates) == reference(assigner, lateness, ops, lambda xs: tuple(sorted(xs)))


# -- hand-picked cases -----------------------------------------------------------------------------


def test_tumbling_lateness_boundary_is_exact() -> None:
    agg: WindowedAggregation[str, int, int, int] = WindowedAggregation(TumblingWindows(10), Count(), 2)
    agg.add("k", 5, 1)
    assert agg.advance(11.75) == []  # 10 + 2 > 11.75: still open
    assert agg.add("k", 9, 1) == []
    assert agg.advance(12) == [("k", Window(0, 10), 2)]  # 10 + 2 <= 12: closes exactly now
    assert agg.add("k", 9.5, 1) == [Late("k", 9.5, Window(0, 10))]
    assert agg.advance(100) == []  # emitted exactly once; the late record did not reopen it


def test_hopping_record_late_for_one_window_counts_in_the_other() -> None:
    agg: WindowedAggregation[str, int, float, float] = WindowedAggregation(HoppingWindows(10, 5), Sum(), 0)
    agg.advance(10)
    assert agg.add("k", 7, 3) == [Late("k", 7, Window(0, 10))]
    assert agg.advance(15) == [("k", Window(5, 15), 3)]


def test_sliding_windows_are_record_anchored_and_closed_at_both_ends() -> None:
    agg: WindowedAggregation[str, int, Any, Any] = WindowedAggregation(SlidingWindows(5), values_aggregator())
    for t in (0, 5, 7, 10.5):
        agg.add("k", t, int(t * 10))
    assert sorted(agg.advance(math.inf)) == [
        ("k", Window(-5, 0), (0,)),
        ("k", Window(0, 5), (0, 50)),  # both ends included
        ("k", Window(2, 7), (50, 70)),
        ("k", Window(5.5, 10.5), (70, 105)),
    ]


def test_sliding_late_record_still_joins_later_open_windows() -> None:
    agg: WindowedAggregation[str, int, int, int] = WindowedAggregation(SlidingWindows(5), Count(), 0)
    agg.add("k", 10, 1)
    assert agg.advance(9) == []
    # At 8 the record's own window [3, 8] has closed, but [5, 10] is open and holds 8.
    assert agg.add("k", 8, 1) == [Late("k", 8, Window(3, 8))]
    assert agg.advance(10) == [("k", Window(5, 10), 2)]


def test_session_merging_through_a_bridging_record() -> None:
    agg: WindowedAggregation[str, int, Any, Any] = WindowedAggregation(SessionWindows(3), values_aggregator())
    agg.add("k", 0, 1)
    agg.add("k", 10, 2)
    agg.add("k", 2, 3)
    assert agg.advance(4.5) == []  # [0, 5) is open until the watermark reaches 5
    agg.add("k", 6, 4)  # 6 - 2 > 3: a new session [6, 9)...
    agg.add("k", 8, 5)  # ...which 8 extends to [6, 11), touching [10, 13): one session [6, 13)
    assert agg.advance(5) == [("k", Window(0, 5), (1, 3))]
    assert agg.advance(math.inf) == [("k", Window(6, 13), (2, 4, 5))]


def test_session_record_behind_the_watermark_is_late_even_if_its_gap_reaches_past_it() -> None:
    agg: WindowedAggregation[str, int, int, int] = WindowedAggregation(SessionWindows(5), Count(), 1)
    agg.add("k", 0, 1)
    assert agg.advance(6) == [("k", Window(0, 5), 1)]
    # t + lateness = 5 <= 6: late, although [4, 9) would end after the watermark; accepting it would
    # have to reopen the session [0, 5) that was already emitted.
    assert agg.add("k", 4, 1) == [Late("k", 4, Window(4, 9))]
    assert agg.add("k", 5.5, 1) == []
    assert agg.advance(math.inf) == [("k", Window(5.5, 10.5), 1)]


def test_records_exactly_gap_apart_share_a_session() -> None:
    agg: WindowedAggregation[str, int, int, int] = WindowedAggregation(SessionWindows(1), Count())
    agg.add("k", 0, 1)
    agg.add("k", 1, 1)
    agg.add("k", 3, 1)
    agg.add("k", 2, 1)  # exactly gap after 1 and before 3
    agg.add("k", 5.25, 1)
    assert agg.advance(math.inf) == [("k", Window(0, 4), 4), ("k", Window(5.25, 6.25), 1)]


def test_keys_are_independent_and_results_come_out_by_closing_time() -> None:
    agg: WindowedAggregation[str, int, int, int] = WindowedAggregation(TumblingWindows(1), Count())
    agg.add("b", 3.5, 1)
    agg.add("a", 0.5, 1)
    agg.add("a", 0.25, 1)
    assert agg.advance(10) == [("a", Window(0, 1), 2), ("b", Window(3, 4), 1)]


def test_state_writes_go_through_the_mapping() -> None:
    store = JsonStore()
    agg: WindowedAggregation[str, int, float, float] = WindowedAggregation(
        TumblingWindows(10), Sum(), 0, store
    )
    agg.add("k", 1, 2)
    agg.add("k", 2, 3)
    assert store.writes == 2
    assert store["k"] == [[[0, 10, 5]], []]
    assert agg.advance(10) == [("k", Window(0, 10), 5)]
    assert len(store) == 0


def test_restore_from_a_store_resumes_pending_windows() -> None:
    store: dict[Any, Any] = {}
    first: WindowedAggregation[str, int, int, int] = WindowedAggregation(SessionWindows(2), Count(), 0, store)
    first.add("k", 1, 1)
    first.add("k", 2, 1)
    second: WindowedAggregation[str, int, int, int] = WindowedAggregation(
        SessionWindows(2), Count(), 0, json.loads(json.dumps(store))
    )
    assert second.advance(4) == [("k", Window(1, 4), 2)]


def test_non_finite_event_times_are_refused() -> None:
    agg: WindowedAggregation[str, int, int, int] = WindowedAggregation(SessionWindows(2), Count())
    for bad in (math.nan, math.inf, -math.inf):
        with pytest.raises(ValueError, match="finite"):
            agg.add("k", bad, 1)


def test_watermark_regressions_are_ignored() -> None:
    agg: WindowedAggregation[str, int, int, int] = WindowedAggregation(TumblingWindows(10), Count())
    agg.advance(20)
    assert agg.advance(5) == []
    assert agg.watermark == 20
    assert agg.add("k", 15, 1) == [Late("k", 15, Window(10, 20))]
