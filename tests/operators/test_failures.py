"""WindowedAggregation when user functions raise: state stays consistent, failures are reported once.

* A record is added atomically: if ``add`` (or, for sessions, ``merge``) raises for any of its
  windows, no window changes, in the mapping or in anything the mapping handed out.
* ``advance`` closes every due window even when ``result`` raises for some of them: the failing
  window leaves the state and is reported once (to ``on_error``, or raised once state is consistent);
  the other windows come out normally.
* ``aggregate(merge=None)`` works wherever no merge is needed and is refused up front for sessions.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from cadenza.errors import ConfigError
from cadenza.operators import (
    Aggregate,
    Count,
    HoppingWindows,
    SessionWindows,
    SlidingWindows,
    TumblingWindows,
    Window,
    WindowedAggregation,
    WindowFailure,
    aggregate,
)


class BoomError(Exception):
    """The user function's failure."""


def _collect_add(acc: list[int], value: int) -> list[int]:
    # Refuses 13, but only for a window that already holds a 2: so for a record in several windows
    # the first windows succeed and a later one raises.
    if value == 13 and 2 in acc:
        raise BoomError("no 13 next to a 2")
    return [*acc, value]


def _merge_lists(a: list[int], b: list[int]) -> list[int]:
    return a + b


COLLECT: Aggregate[int, list[int], list[int]] = aggregate(list, _collect_add, _merge_lists)


def _snapshot(state: Any) -> Any:
    return json.loads(json.dumps(list(state.items())))


# -- atomic add ------------------------------------------------------------------------------------


def test_hopping_add_raising_for_a_later_window_leaves_every_window_as_before() -> None:
    state: dict[Any, Any] = {}
    agg: WindowedAggregation[str, int, list[int], list[int]] = WindowedAggregation(
        HoppingWindows(10, 5), COLLECT, 0, state
    )
    agg.add("k", 2, 1)  # [-5, 5) and [0, 10)
    agg.add("k", 12, 2)  # [5, 15) and [10, 20)
    before = _snapshot(state)
    held = copy.deepcopy(state["k"])
    # t=8 is in [0, 10) (holds [1]: add succeeds) and [5, 15) (holds [2]: add raises).
    with pytest.raises(BoomError):
        agg.add("k", 8, 13)
    assert _snapshot(state) == before
    assert state["k"] == held
    # And nothing of the failed record comes out later.
    assert agg.advance(100) == [
        ("k", Window(-5, 5), [1]),
        ("k", Window(0, 10), [1]),
        ("k", Window(5, 15), [2]),
        ("k", Window(10, 20), [2]),
    ]


def test_hopping_add_raising_after_opening_a_new_window_opens_nothing() -> None:
    state: dict[Any, Any] = {}
    agg: WindowedAggregation[str, int, list[int], list[int]] = WindowedAggregation(
        HoppingWindows(10, 5), COLLECT, 0, state
    )
    agg.add("k", 12, 2)  # [5, 15) and [10, 20)
    before = _snapshot(state)
    # t=7 opens [0, 10) (new: succeeds) and then raises in [5, 15).
    with pytest.raises(BoomError):
        agg.add("k", 7, 13)
    assert _snapshot(state) == before
    assert agg.advance(100) == [("k", Window(5, 15), [2]), ("k", Window(10, 20), [2])]


def test_sliding_add_raising_partway_leaves_windows_and_buffer_as_before() -> None:
    state: dict[Any, Any] = {}
    agg: WindowedAggregation[str, int, list[int], list[int]] = WindowedAggregation(
        SlidingWindows(10), COLLECT, 0, state
    )
    agg.add("k", 1, 1)  # window [-9, 1]
    agg.add("k", 3, 2)  # window [-7, 3] holds [1, 2]
    before = _snapshot(state)
    with pytest.raises(BoomError):
        agg.add("k", 3, 13)  # [-9, 1] does not hold 3; [-7, 3] holds a 2 and raises
    assert _snapshot(state) == before
    with pytest.raises(BoomError):
        agg.add("k", 4, 13)  # fits no window but its own [-6, 4], whose fold meets the 2
    assert _snapshot(state) == before
    assert agg.advance(100) == [("k", Window(-9, 1), [1]), ("k", Window(-7, 3), [1, 2])]


def test_session_merge_raising_leaves_sessions_unchanged() -> None:
    def merge(a: list[int], b: list[int]) -> list[int]:
        raise BoomError("no merging")

    state: dict[Any, Any] = {}
    agg: WindowedAggregation[str, int, list[int], list[int]] = WindowedAggregation(
        SessionWindows(3), aggregate(list, _collect_add, merge), 0, state
    )
    agg.add("k", 0, 1)
    agg.add("k", 5, 2)
    before = _snapshot(state)
    with pytest.raises(BoomError):
        agg.add("k", 2.5, 3)  # bridges [0, 3] and [5, 8]
    assert _snapshot(state) == before
    with pytest.raises(BoomError):
        agg.add("k", 6, 13)  # joins [5, 8], whose add raises
    assert _snapshot(state) == before
    assert agg.advance(100) == [("k", Window(0, 3), [1]), ("k", Window(5, 8), [2])]


# -- advance with a raising result -----------------------------------------------------------------


def _result_refusing_bad(acc: int) -> int:
    if acc < 0:
        raise BoomError(f"negative total {acc}")
    return acc


def _summing(state: dict[Any, Any]) -> WindowedAggregation[str, int, int, int]:
    agg: Aggregate[int, int, int] = aggregate(
        lambda: 0, lambda acc, v: acc + v, lambda a, b: a + b, _result_refusing_bad
    )
    return WindowedAggregation(TumblingWindows(10), agg, 0, state)


def test_advance_reports_a_raising_result_and_still_emits_the_other_keys() -> None:
    state: dict[Any, Any] = {}
    agg = _summing(state)
    agg.add("a", 1, 1)
    agg.add("bad", 2, -1)
    agg.add("bad", 12, 5)  # a later window of the failing key, still open
    agg.add("c", 3, 3)
    failures: list[WindowFailure] = []
    assert agg.advance(10, on_error=failures.append) == [("a", Window(0, 10), 1), ("c", Window(0, 10), 3)]
    assert [(f.key, f.window, type(f.error)) for f in failures] == [("bad", Window(0, 10), BoomError)]
    # The failed window is gone from state; the key's open window is not.
    assert state == {"bad": [[[10, 20, 5]], []]}
    # Exactly once: neither a repeated advance nor a later one reports or emits it again.
    assert agg.advance(10, on_error=failures.append) == []
    assert agg.advance(20, on_error=failures.append) == [("bad", Window(10, 20), 5)]
    assert len(failures) == 1
    assert state == {}


def test_advance_without_on_error_raises_once_after_state_is_consistent() -> None:
    state: dict[Any, Any] = {}
    agg = _summing(state)
    agg.add("a", 1, 1)
    agg.add("bad", 2, -1)
    agg.add("c", 3, 3)
    with pytest.raises(BoomError):
        agg.advance(10)
    assert state == {}
    assert agg.watermark == 10
    # The windows that closed fine are not lost: the next advance hands them out, and the failure
    # is not raised again.
    assert agg.advance(10) == [("a", Window(0, 10), 1), ("c", Window(0, 10), 3)]
    assert agg.advance(30) == []


def test_advance_without_on_error_raises_a_group_for_several_failures() -> None:
    agg = _summing({})
    agg.add("x", 1, -1)
    agg.add("y", 2, -2)
    agg.add("z", 3, 4)
    with pytest.raises(ExceptionGroup) as info:
        agg.advance(10)
    assert len(info.value.exceptions) == 2
    assert all(isinstance(exc, BoomError) for exc in info.value.exceptions)
    assert agg.advance(10) == [("z", Window(0, 10), 4)]


def test_a_raising_on_error_keeps_the_results_for_the_next_advance() -> None:
    agg = _summing({})
    agg.add("a", 1, 1)
    agg.add("bad", 2, -1)

    def on_error(failure: WindowFailure) -> None:
        raise RuntimeError("handler broke")

    with pytest.raises(RuntimeError):
        agg.advance(10, on_error=on_error)
    reported: list[WindowFailure] = []
    assert agg.advance(10, on_error=reported.append) == [("a", Window(0, 10), 1)]
    assert reported == []


# -- merge=None ------------------------------------------------------------------------------------


def test_aggregate_without_merge_works_for_tumbling_and_hopping() -> None:
    no_merge: Aggregate[int, int, int] = aggregate(lambda: 0, lambda acc, v: acc + v, None)
    assert not no_merge.mergeable
    for assigner in (TumblingWindows(10), HoppingWindows(10, 5), SlidingWindows(5)):
        agg: WindowedAggregation[str, int, int, int] = WindowedAggregation(assigner, no_merge)
        agg.add("k", 1, 2)
        agg.add("k", 3, 3)
        assert [r.result for r in agg.advance(100)][-1] >= 3


def test_aggregate_without_merge_is_refused_for_session_windows_at_construction() -> None:
    no_merge: Aggregate[int, int, int] = aggregate(lambda: 0, lambda acc, v: acc + v)
    with pytest.raises(ConfigError, match="merge"):
        WindowedAggregation(SessionWindows(2), no_merge)
    with pytest.raises(ConfigError, match="merge"):
        no_merge.merge(1, 2)
    assert aggregate(lambda: 0, lambda acc, v: acc + v, lambda a, b: a + b).mergeable
    assert WindowedAggregation(SessionWindows(2), Count()).advance(1) == []
