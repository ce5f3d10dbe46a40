"""Critical participation against a hand-computed window and against brute-force path enumeration."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cadenza.analysis import Activity, critical_participation, window_participation

A = Activity


def test_hand_computed_window() -> None:
    """Two workers, window [0, 10], one message A@4 -> B@5.

    Timelines: A = P1 [0,4] then gap [4,10]; B = gap [0,2], P2 [2,8] (split at 5 by the message),
    gap [8,10]. Nodes A0, A4, A10, B0, B2, B5, B8, B10; edges P1 A0-A4, gA A4-A10, M A4-B5, gB1 B0-B2,
    P2a B2-B5, P2b B5-B8, gB2 B8-B10.

    Forward counts f (paths from a source): A0=1, A4=1, A10=1, B0=1, B2=1, B5=f(B2)+f(A4)=2, B8=2, B10=2.
    Backward counts b (paths to a sink): A10=1, B10=B8=B5=B2=B0=1, A4=b(A10)+b(B5)=2, A0=2.
    N = b(A0) + b(B0) = 3 (= f(A10) + f(B10)): A0-A4-A10, A0-A4-B5-B10, B0-...-B10. N * (t1 - t0) = 30.

    CP(P1)  = 4 * f(A0)b(A4) / 30 = 4*2/30 = 8/30
    CP(P2)  = [3 * f(B2)b(B5) + 3 * f(B5)b(B8)] / 30 = (3*1 + 3*2)/30 = 9/30
    CP(M)   = 1 * f(A4)b(B5) / 30 = 1/30
    gaps:  gA = 6*1*1/30 = 6/30, gB1 = 2*1*1/30 = 2/30, gB2 = 2*2*1/30 = 4/30;  8+9+1+6+2+4 = 30.
    """
    acts = [
        A("A", 0, 4, "processing", "x"),
        A("B", 2, 8, "processing", "y"),
        A("A", 4, 5, "message", to_worker="B"),
    ]
    assert critical_participation(acts, 0, 10) == pytest.approx([8 / 30, 9 / 30, 1 / 30])
    result = window_participation(acts, 0, 10)
    assert result.paths == 3
    assert [(g.worker, g.start, g.end, g.kind) for g in result.gaps] == [
        ("A", 4, 10, "unknown"),
        ("B", 0, 2, "unknown"),
        ("B", 8, 10, "unknown"),
    ]
    assert result.gap_cp == pytest.approx((6 / 30, 2 / 30, 4 / 30))


def test_activities_are_truncated_to_the_window() -> None:
    # One worker, one path: CP is the share of the window the activity covers.
    acts = [A("w", -5, 3, "processing"), A("w", 3, 4, "serialization"), A("w", 9, 20, "buffer")]
    assert critical_participation(acts, 0, 10) == pytest.approx([0.3, 0.1, 0.1])


def test_message_outside_the_window_is_not_in_the_graph() -> None:
    acts = [A("a", 0, 10, "processing"), A("b", 0, 10, "processing"), A("a", -1, 5, "message", to_worker="b")]
    assert critical_participation(acts, 0, 10) == [0.5, 0.5, 0.0]
    acts[2] = A("a", 5, 11, "message", to_worker="b")
    assert critical_participation(acts, 0, 10) == [0.5, 0.5, 0.0]


def test_a_worker_named_only_by_a_message_still_has_a_timeline() -> None:
    # "c" appears only as the target of an out-of-window message: its whole-window gap is a path too.
    acts = [A("a", 0, 10, "processing"), A("a", 20, 30, "message", to_worker="c")]
    result = window_participation(acts, 0, 10)
    assert result.paths == 2
    assert result.cp[0] == pytest.approx(0.5)
    assert [(g.worker, g.start, g.end) for g in result.gaps] == [("c", 0, 10)]


def test_waiting_carries_no_paths() -> None:
    acts = [A("a", 0, 10, "processing"), A("b", 0, 4, "processing"), A("b", 4, 10, "waiting")]
    result = window_participation(acts, 0, 10)
    assert result.paths == 1
    assert result.cp == (1.0, 0.0, 0.0)


def test_no_paths_means_all_zero() -> None:
    acts = [A("a", 0, 10, "waiting"), A("b", 0, 3, "processing"), A("b", 3, 10, "waiting")]
    result = window_participation(acts, 0, 10)
    assert result.paths == 0
    assert result.cp == (0.0, 0.0, 0.0)


def test_message_to_self_is_a_shortcut_on_its_own_timeline() -> None:
    # Paths: the timeline w0-w2-w8-w10 and w0-w2 -> message -> w8-w10; N = 2.
    acts = [A("w", 0, 2, "processing"), A("w", 2, 8, "buffer"), A("w", 2, 8, "message", to_worker="w")]
    assert critical_participation(acts, 0, 10) == pytest.approx([2 * 2 / 20, 6 * 1 / 20, 6 * 1 / 20])


def test_zero_length_cycle_on_a_path_raises() -> None:
    acts = [A("a", 5, 5, "message", to_worker="b"), A("b", 5, 5, "message", to_worker="a")]
    with pytest.raises(ValueError, match=r"cycle.*message activity on"):
        critical_participation(acts, 0, 10)
    with pytest.raises(ValueError, match="cycle"):
        critical_participation([A("a", 5, 5, "message", to_worker="a")], 0, 10)


def test_zero_length_cycle_off_every_path_is_harmless() -> None:
    # Both timelines wait across the cycle's time, so no path from t0 reaches it.
    acts = [
        A("a", 0, 10, "waiting"),
        A("b", 0, 10, "waiting"),
        A("a", 5, 5, "message", to_worker="b"),
        A("b", 5, 5, "message", to_worker="a"),
    ]
    assert critical_participation(acts, 0, 10) == [0.0, 0.0, 0.0, 0.0]


@pytest.mark.parametrize(
    ("acts", "start", "end", "match"),
    [
        (
            [A("a", 5, 4, "message", to_worker="b")],
            0,
            10,
            r"message arrives before it is sent: message activity on a->b",
        ),
        ([A("a", 5, 4, "processing", "op")], 0, 10, r"ends before it starts.*operator='op'"),
        (
            [A("a", 0, 5, "processing", "p"), A("a", 4, 6, "buffer")],
            0,
            10,
            r"overlapping.*operator='p'.*buffer",
        ),
        ([A("a", 0, 5, "processing"), A("a", 2, 2, "buffer")], 0, 10, r"overlapping"),
        ([A("a", 0, 5, "computing")], 0, 10, r"unknown kind 'computing' in computing activity on a"),
        ([A("a", 0, 5, "processing", to_worker="b")], 0, 10, r"only a message has a to_worker"),
        ([A("a", 0, 5, "message")], 0, 10, r"message without to_worker"),
        ([A("a", 0, math.nan, "processing")], 0, 10, r"non-finite"),
        ([A("", 0, 1, "processing")], 0, 10, r"no worker"),
        ([A("a", 0, 5, "processing")], 10, 10, r"window .* must end after it starts"),
        ([A("a", 0, 5, "processing")], 0, math.inf, r"non-finite bound"),
    ],
)
def test_bad_input_raises_naming_the_activity(
    acts: list[Activity], start: float, end: float, match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        critical_participation(acts, start, end)


def test_touching_activities_and_points_at_bounds_are_accepted() -> None:
    acts = [
        A("a", 0, 5, "processing"),
        A("a", 5, 5, "buffer"),
        A("a", 5, 10, "processing"),
        A("a", 0, 0, "buffer"),
    ]
    assert critical_participation(acts, 0, 10) == pytest.approx([0.5, 0.0, 0.5, 0.0])


def test_path_counts_beyond_float_range_stay_exact() -> None:
    # 1100 diamonds in a row between two workers: 2**1100 paths, far past a float's range.
    acts = []
    for k in range(1, 1101):
        acts.append(A("a", k, k + 0.5, "message", to_worker="b"))
        acts.append(A("b", k + 0.5, k + 1, "message", to_worker="a"))
    result = window_participation(acts, 0, 1102)
    assert result.paths > 2**1000
    total = math.fsum(result.cp) + math.fsum(result.gap_cp)
    assert total == pytest.approx(1.0)


# --- brute force -------------------------------------------------------------------------------------

WORKERS = ("a", "b", "c")
KINDS = ("processing", "buffer", "waiting", "unknown", "serialization")


@st.composite
def traces(draw: st.DrawFn) -> tuple[list[Activity], int, int]:
    start = draw(st.integers(0, 4))
    end = draw(st.integers(start + 1, 12))
    acts: list[Activity] = []
    for w in draw(st.lists(st.sampled_from(WORKERS), min_size=1, max_size=3, unique=True)):
        cuts = sorted(draw(st.sets(st.integers(-2, 14), max_size=6)))
        for lo, hi in itertools.pairwise(cuts):
            if draw(st.booleans()):
                acts.append(A(w, lo, hi, draw(st.sampled_from(KINDS)), operator=f"op{lo}"))
    for _ in range(draw(st.integers(0, 4))):
        src, dst = draw(st.sampled_from(WORKERS)), draw(st.sampled_from(WORKERS))
        s = draw(st.integers(-1, 13))
        # Zero-length messages only from a lower to a higher worker so that no cycle can form.
        least = 0 if WORKERS.index(src) < WORKERS.index(dst) else 1
        e = s + draw(st.integers(least, 5))
        acts.append(A(src, s, e, "message", to_worker=dst))
    draw(st.randoms()).shuffle(acts)
    return acts, start, end


def brute_force(acts: list[Activity], start: int, end: int) -> tuple[list[Fraction], Fraction, int]:
    """CP of each activity and the sum of all CPs (gaps included), by listing every path."""
    named = {a.worker for a in acts} | {a.to_worker for a in acts if a.to_worker}
    in_window = [a.kind == "message" and start <= a.start and a.end <= end for a in acts]
    graph: dict[tuple[str, float], list[tuple[tuple[str, float], int | None, Fraction]]] = {}
    for w in named:
        pts: set[float] = {start, end}
        for i, a in enumerate(acts):
            if a.kind != "message" and a.worker == w and min(a.end, end) > max(a.start, start):
                pts |= {max(a.start, start), min(a.end, end)}
            if in_window[i]:
                pts |= {a.start} if a.worker == w else set()
                pts |= {a.end} if a.to_worker == w else set()
        ordered = sorted(pts)
        for p, q in itertools.pairwise(ordered):
            mid = Fraction(p + q) / 2
            owner = [
                i
                for i, a in enumerate(acts)
                if a.kind != "message" and a.worker == w and a.start <= mid <= a.end
            ]
            assert len(owner) <= 1
            if owner and acts[owner[0]].kind == "waiting":
                continue
            graph.setdefault((w, p), []).append(((w, q), owner[0] if owner else None, Fraction(q - p)))
    for i, a in enumerate(acts):
        if in_window[i]:
            assert a.to_worker is not None
            graph.setdefault((a.worker, a.start), []).append(
                ((a.to_worker, a.end), i, Fraction(a.end - a.start))
            )

    weight_on_paths = [Fraction(0)] * len(acts)
    all_weight = Fraction(0)
    count = 0

    def walk(
        node: tuple[str, float], trail: list[tuple[int | None, Fraction]]
    ) -> Iterator[list[tuple[int | None, Fraction]]]:
        if node[1] == end:
            yield trail
        for nxt, label, weight in graph.get(node, []):
            yield from walk(nxt, [*trail, (label, weight)])

    for w in named:
        for trail in walk((w, start), []):
            count += 1
            for label, weight in trail:
                all_weight += weight
                if label is not None:
                    weight_on_paths[label] += weight
    if count == 0:
        return [Fraction(0)] * len(acts), Fraction(0), 0
    scale = count * (end - start)
    return [x / scale for x in weight_on_paths], all_weight / scale, count


@settings(max_examples=1500, deadline=None)
@given(traces())
def test_matches_brute_force_path_enumeration(trace: tuple[list[Activity], int, int]) -> None:
    acts, start, end = trace
    expected, expected_total, paths = brute_force(acts, start, end)
    result = window_participation(acts, start, end)
    assert result.paths == paths
    assert list(result.cp) == pytest.approx([float(x) for x in expected], abs=1e-12)
    assert critical_participation(acts, start, end) == list(result.cp)
    assert math.fsum(result.cp) + math.fsum(result.gap_cp) == pytest.approx(float(expected_total), abs=1e-12)
    if paths:
        assert expected_total == 1  # every path spans the window, so the shares tile it
