"""The windowed join against a brute-force pairing of the same records (no broker)."""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest

from cadenza.errors import ConfigError
from cadenza.operators import LEFT, RIGHT, WatermarkTracker, Window, WindowedJoin

Event = tuple[int, str, float, int]  # side, key, event time, value id
Pair = tuple[str, int, int, float]  # key, left id, right id, event time


def events(seed: int, n: int = 300) -> list[Event]:
    """Both sides interleaved, times jittered around a rising clock, some records seconds late."""
    rng = random.Random(seed)
    out: list[Event] = []
    for i in range(n):
        base = i * 0.1
        jitter = rng.choice([-0.5, -0.25, 0.0, 0.0, 0.25])
        late = rng.random() < 0.05
        t = max(0.0, base - rng.choice([3.0, 5.0]) if late else base + jitter)
        out.append((rng.randrange(2), f"k{rng.randrange(4)}", t, i))
    return out


def brute_force(
    evs: list[Event], within: float, lateness: float, disorder: float
) -> tuple[Counter[Pair], list[int]]:
    """Every pair of non-late records with equal keys at most ``within`` apart; late = join window
    ``[t - within, t + within]`` closed (end + lateness <= watermark before the record)."""
    watermark = -math.inf
    newest = -math.inf
    kept: list[Event] = []
    late: list[int] = []
    for event in evs:
        _, _, t, ident = event
        if t + within + lateness <= watermark:
            late.append(ident)
        else:
            kept.append(event)
        newest = max(newest, t)
        watermark = max(watermark, newest - disorder)
    pairs: Counter[Pair] = Counter()
    for side_l, key_l, t_l, id_l in kept:
        for side_r, key_r, t_r, id_r in kept:
            if side_l == LEFT and side_r == RIGHT and key_l == key_r and abs(t_l - t_r) <= within:
                pairs[(key_l, id_l, id_r, max(t_l, t_r))] += 1
    return pairs, late


def run(
    join: WindowedJoin, evs: list[Event], disorder: float, tracker: WatermarkTracker | None = None
) -> tuple[Counter[Pair], list[int], WatermarkTracker]:
    tracker = tracker or WatermarkTracker([0], max_out_of_orderness=disorder)
    pairs: Counter[Pair] = Counter()
    late: list[int] = []
    for side, key, t, ident in evs:
        matches, missed = join.add(side, key, t, ident)
        if missed is not None:
            assert missed.window == Window(t - join.within, t + join.within)
            late.append(ident)
        for match in matches:
            pairs[(match.key, match.left, match.right, match.event_time)] += 1
        tracker.observe(0, t)
        join.advance(tracker.watermark())
    return pairs, late, tracker


@pytest.mark.parametrize(("seed", "within", "lateness"), [(1, 0.5, 0.0), (2, 1.0, 0.5), (3, 0.25, 1.0)])
def test_matches_and_late_records_equal_a_brute_force_pairing(
    seed: int, within: float, lateness: float
) -> None:
    evs = events(seed)
    want, want_late = brute_force(evs, within, lateness, disorder=0.5)
    got, got_late, _ = run(WindowedJoin(within, lateness), evs, disorder=0.5)
    assert want_late  # the data does exercise lateness
    assert got == want
    assert got_late == want_late


def test_state_is_expired_by_the_watermark_and_stays_bounded() -> None:
    join = WindowedJoin(0.5, 0.0)
    tracker = WatermarkTracker([0])
    peak = 0
    for i in range(2000):
        t = i * 0.1
        join.add(i % 2, f"k{i % 3}", t, i)
        tracker.observe(0, t)
        join.advance(tracker.watermark())
        peak = max(peak, sum(len(left) + len(right) for left, right in join.state.values()))
    # A record lives until t + 2 * within + lateness is below the watermark: about 1 s of records.
    assert 0 < peak <= 2 * (2 * 0.5 / 0.1) + 2


def test_a_restored_state_resumes_exactly_where_the_first_left_off() -> None:
    evs = events(5)
    want, want_late, _ = run(WindowedJoin(0.5, 0.25), evs, disorder=0.5)
    first = WindowedJoin(0.5, 0.25)
    half = len(evs) // 2
    got_a, late_a, tracker = run(first, evs[:half], disorder=0.5)
    restored = dict(first.state)  # what a changelog restore hands back
    second = WindowedJoin(0.5, 0.25, state=restored)
    second.advance(first.watermark)
    got_b, late_b, _ = run(second, evs[half:], disorder=0.5, tracker=tracker)
    assert got_a + got_b == want
    assert late_a + late_b == want_late


def test_on_narrows_matches_and_a_raising_on_stores_nothing() -> None:
    join = WindowedJoin(1.0, on=lambda left, right: left["n"] < right["n"])
    assert join.add(LEFT, "k", 1.0, {"n": 5}) == ([], None)
    matches, _ = join.add(RIGHT, "k", 1.5, {"n": 9})
    assert [(m.left["n"], m.right["n"], m.event_time) for m in matches] == [(5, 9, 1.5)]
    assert join.add(RIGHT, "k", 1.5, {"n": 1}) == ([], None)
    before = {k: [list(left), list(right)] for k, (left, right) in join.state.items()}
    with pytest.raises(KeyError):
        join.add(RIGHT, "k", 1.2, {"missing": 1})  # on() raises reading the right value
    assert {k: [list(left), list(right)] for k, (left, right) in join.state.items()} == before


def test_bad_input_is_refused_clearly() -> None:
    with pytest.raises(ConfigError, match="within"):
        WindowedJoin(-1.0)
    with pytest.raises(ConfigError, match="allowed_lateness"):
        WindowedJoin(1.0, math.nan)
    join = WindowedJoin(1.0)
    with pytest.raises(ValueError, match="finite"):
        join.add(LEFT, "k", math.nan, 1)
    with pytest.raises(ValueError, match="side"):
        join.add(2, "k", 1.0, 1)
    assert not join.state
