"""Window assignment and session merging."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cadenza.errors import ConfigError
from cadenza.operators import (
    HoppingWindows,
    SessionStore,
    TumblingWindows,
    Window,
    hopping,
    merge_session,
    session,
    sliding,
    tumbling,
)

TIMES = st.floats(min_value=-1e6, max_value=1e9, allow_nan=False)
SIZES = st.floats(min_value=1e-3, max_value=1e5, allow_nan=False)


def test_tumbling_examples() -> None:
    windows = tumbling("10s")
    assert windows.assign(0) == [Window(0, 10)]
    assert windows.assign(9.999) == [Window(0, 10)]
    assert windows.assign(10) == [Window(10, 20)]
    assert windows.assign(-0.5) == [Window(-10, 0)]


@given(TIMES, SIZES)
def test_tumbling_window_contains_its_time(t: float, size: float) -> None:
    (window,) = TumblingWindows(size).assign(t)
    assert window.start <= t < window.end


@given(st.integers(-1000, 1000), st.integers(1, 50))
def test_tumbling_is_aligned_to_epoch(t: int, size: int) -> None:
    (window,) = TumblingWindows(size).assign(t)
    assert window == Window(t - t % size, t - t % size + size)


def test_tumbling_survives_decimal_sizes() -> None:
    windows = TumblingWindows(0.1)
    for n in range(1000):
        t = n * 0.1
        (window,) = windows.assign(t)
        assert window.start <= t < window.end


def test_hopping_examples() -> None:
    windows = hopping("10s", "5s")
    assert windows.assign(7) == [Window(0, 10), Window(5, 15)]
    assert windows.assign(10) == [Window(5, 15), Window(10, 20)]
    gaps = hopping(2, 5)
    assert gaps.assign(1) == [Window(0, 2)]
    assert gaps.assign(3) == []


@given(st.integers(-200, 200), st.integers(1, 20), st.integers(1, 20))
def test_hopping_matches_enumeration(t: int, size: int, hop: int) -> None:
    expected = [Window(k * hop, k * hop + size) for k in range(-300, 300) if k * hop <= t < k * hop + size]
    assert HoppingWindows(size, hop).assign(t) == expected


@given(TIMES, SIZES, st.floats(min_value=0.01, max_value=100))
def test_hopping_windows_contain_their_time(t: float, size: float, ratio: float) -> None:
    hop = size / ratio
    windows = HoppingWindows(size, hop).assign(t)
    assert all(w.start <= t < w.end for w in windows)
    if hop <= size:
        assert len(windows) >= 1
    assert len(windows) <= math.ceil(size / hop) + 1


def test_sliding_and_session_windows_of_a_record() -> None:
    assert sliding("5s").window_of(12) == Window(7, 12)
    assert session("30s").window_of(100) == Window(100, 130)
    assert sliding("250ms").size == 0.25


@pytest.mark.parametrize("bad", [0, "0s", -1, "soon", float("nan")])
def test_sizes_must_be_positive_durations(bad: object) -> None:
    with pytest.raises(ConfigError):
        tumbling(bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        session(bad)  # type: ignore[arg-type]


def test_merge_session_cases() -> None:
    sessions = [Window(0, 5), Window(20, 25)]
    # A lone record far away opens its own session.
    assert merge_session(sessions, 50, 5) == (Window(50, 55), [])
    # Inside an existing session: that session, unchanged.
    assert merge_session(sessions, 2, 5) == (Window(0, 7), [Window(0, 5)])
    # Exactly gap after the last record (end == t): merges, since gaps up to `gap` are allowed.
    assert merge_session(sessions, 5, 5) == (Window(0, 10), [Window(0, 5)])
    # Just over the gap: does not.
    assert merge_session(sessions, 5.5, 3) == (Window(5.5, 8.5), [])
    # Exactly gap before the first record: merges.
    assert merge_session(sessions, 15, 5) == (Window(15, 25), [Window(20, 25)])
    # Bridging two sessions merges all three.
    bridged = merge_session([Window(0, 5), Window(10, 15)], 5, 5)
    assert bridged == (Window(0, 15), [Window(0, 5), Window(10, 15)])


def test_session_store_reports_merges() -> None:
    store = SessionStore(5)
    assert store.add(0) == (Window(0, 5), [])
    assert store.add(10) == (Window(10, 15), [])
    assert store.add(30) == (Window(30, 35), [])
    assert store.add(3) == (Window(0, 8), [Window(0, 5)])
    assert store.sessions == [Window(0, 8), Window(10, 15), Window(30, 35)]
    assert store.add(8) == (Window(0, 15), [Window(0, 8), Window(10, 15)])
    assert store.sessions == [Window(0, 15), Window(30, 35)]
    store.remove(Window(30, 35))
    store.remove(Window(0, 15))
    assert len(store) == 0
    with pytest.raises(ConfigError):
        SessionStore(0)


@given(st.lists(st.integers(0, 100), min_size=1, max_size=30), st.integers(1, 10))
def test_session_store_equals_gap_components(times: list[int], gap: int) -> None:
    store = SessionStore(gap)
    for t in times:
        window, merged = store.add(t)
        assert window.start <= t < window.end
        assert all(window.start <= m.start and m.end <= window.end for m in merged)
    ordered = sorted(times)
    components: list[list[int]] = [[ordered[0]]]
    for t in ordered[1:]:
        if t - components[-1][-1] <= gap:
            components[-1].append(t)
        else:
            components.append([t])
    assert store.sessions == [Window(c[0], c[-1] + gap) for c in components]
