"""Summaries group a window's critical participation by kind, worker, operator and channel."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings

from cadenza.analysis import Activity, WindowSummary, summarize, top, window_participation, window_summaries
from tests.analysis.test_critical import traces

A = Activity


def test_hand_computed_summary() -> None:
    """The window of ``test_hand_computed_window`` (CPs in 30ths: P1 8, P2 9, M 1, gaps A 6, B 2 + 4)."""
    acts = [
        A("A", 0, 4, "processing", "x"),
        A("B", 2, 8, "processing", "y"),
        A("A", 4, 5, "message", to_worker="B", topic="t"),
    ]
    s = summarize(window_participation(acts, 0, 10))
    assert s.by_kind == pytest.approx({"processing": 17 / 30, "message": 1 / 30, "unknown": 12 / 30})
    assert s.by_worker == pytest.approx({"A": 14 / 30, "B": 15 / 30})
    assert s.by_operator == pytest.approx({"x": 8 / 30, "y": 9 / 30})
    assert s.by_channel == pytest.approx({"A -> B via t": 1 / 30})
    assert top(s.by_worker, 1)[0][0] == "B"
    assert WindowSummary.from_json(s.to_json()) == s


@settings(max_examples=300, deadline=None)
@given(traces())
def test_each_grouping_accounts_for_every_edge(trace: tuple[list[Activity], int, int]) -> None:
    acts, start, end = trace
    result = window_participation(acts, start, end)
    s = summarize(result)
    total = math.fsum(cp for _, cp in result.edges())
    assert math.fsum(s.by_kind.values()) == pytest.approx(total)
    messages = math.fsum(cp for a, cp in result.edges() if a.is_message)
    assert math.fsum(s.by_worker.values()) + math.fsum(s.by_channel.values()) == pytest.approx(total)
    assert math.fsum(s.by_channel.values()) == pytest.approx(messages)
    assert total == pytest.approx(1.0 if result.paths else 0.0)


def straggler_trace(slow: str, fast: str, rounds: int) -> list[Activity]:
    """``fast`` handles each record in 1 s, then waits for the next one ``slow`` sends after 3 s."""
    acts: list[Activity] = []
    for r in range(rounds):
        t = 4.0 * r
        acts.append(A(slow, t, t + 3.0, "processing", "heavy"))
        acts.append(A(slow, t + 3.0, t + 4.0, "serialization", "heavy"))
        acts.append(A(slow, t + 4.0, t + 4.0, "message", to_worker=fast, topic="mid"))
        acts.append(A(fast, t, t + 1.0, "processing", "light"))
        acts.append(A(fast, t + 1.0, t + 4.0, "waiting"))
    return acts


def test_straggler_ranks_first_in_every_window() -> None:
    summaries = window_summaries(straggler_trace("w1", "w2", 10), 0.0, 40.0, 8.0)
    assert len(summaries) == 5
    for s in summaries:
        assert top(s.by_worker, 1)[0][0] == "w1"
        assert top(s.by_operator, 1)[0][0] == "heavy"
        assert math.fsum(s.by_kind.values()) == pytest.approx(1.0)


def test_a_worker_silent_in_a_window_keeps_its_timeline() -> None:
    acts = [A("a", 0, 10, "processing"), A("b", 0, 5, "processing")]
    later = window_summaries(acts, 0, 20, 10)[1]
    assert later.by_worker == pytest.approx({"a": 0.5, "b": 0.5})
    assert later.by_kind == pytest.approx({"unknown": 1.0})


@pytest.mark.parametrize(("start", "end", "width"), [(0, 10, 0), (0, 10, -1), (5, 5, 1)])
def test_bad_ranges_raise(start: float, end: float, width: float) -> None:
    with pytest.raises(ValueError, match="must"):
        window_summaries([], start, end, width)
