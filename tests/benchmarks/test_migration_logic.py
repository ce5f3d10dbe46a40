"""The pure parts of S5: reading ownership from worker logs, when a migration ends, the brute-force
window results and their check, the scoring of the migration periods and the JSON's shape."""

from __future__ import annotations

import json
from typing import Any

import pytest
from bench_migration import (
    STRATEGIES,
    GroupRebalance,
    LsResult,
    OwnershipEvent,
    back_on_target,
    brute_force_counts,
    check_shape,
    check_windows,
    choose_strategies,
    collector_pauses,
    compare_input,
    complete,
    expected_ls_windows,
    format_table,
    ls_latencies,
    migration_end,
    ownership,
    parse_log,
    score_periods,
    strategy_entry,
)
from hypothesis import given, settings
from hypothesis import strategies as st

P = [("in", p) for p in range(4)] + [("ls", p) for p in range(2)]
ALL = set(P)


def ev(at: float, worker: str, kind: str, *parts: tuple[str, int]) -> OwnershipEvent:
    return OwnershipEvent(at, worker, kind, frozenset(parts))  # type: ignore[arg-type]


# -- logs -------------------------------------------------------------------------------------------


def test_collector_pauses_reads_the_workers_warnings_and_nothing_else() -> None:
    lines = [
        "1795604938.657 cadenza.worker WARNING a full garbage collection stopped the worker for 1876 ms; "
        "what survived it is frozen now, so the next one walks only what is new",
        "1795604939.000 cadenza.worker INFO assigned nothing",
        "1795604940.5 cadenza.worker WARNING a full garbage collection stopped the worker for 250 ms; x",
    ]
    assert collector_pauses("w1", lines) == [("w1", 1795604938.657, 1876.0), ("w1", 1795604940.5, 250.0)]


def test_parse_log_reads_assigned_revoked_lost_and_restored_lines_and_ignores_the_rest() -> None:
    lines = [
        "1795604938.657 cadenza.worker INFO worker started in group g with policy cameo, reading a, b",
        "1795604941.676 cadenza.worker INFO assigned s5-x-big-in[0], s5-x-big-in[1], "
        "s5-ls-x.2-key_by.repartition[3]",
        "1795604950.741 cadenza.worker INFO revoked s5-x-big-in[1] (12 queued record(s) handed back)",
        "1795604951.000 cadenza.worker INFO lost s5-x-big-in[0] (0 queued record(s) handed back)",
        "1795604952.000 cadenza.worker INFO assigned nothing",
        "1795604954.056 cadenza.worker INFO restored s5-big-x.2-count.changelog[2]: 1249 keys from 2309 "
        "changelog records (0 uncommitted discarded); Position(offset=1, watermark=2.0)",
        "Traceback (most recent call last):",
    ]
    owned, restored = parse_log("w1", lines)
    assert owned == [
        ev(
            1795604941.676,
            "w1",
            "assigned",
            ("s5-x-big-in", 0),
            ("s5-x-big-in", 1),
            ("s5-ls-x.2-key_by.repartition", 3),
        ),
        ev(1795604950.741, "w1", "revoked", ("s5-x-big-in", 1)),
        ev(1795604951.0, "w1", "lost", ("s5-x-big-in", 0)),
        ev(1795604952.0, "w1", "assigned"),
    ]
    assert [(r.at, r.worker, r.partition, r.keys, r.records) for r in restored] == [
        (1795604954.056, "w1", ("s5-big-x.2-count.changelog", 2), 1249, 2309)
    ]


def test_an_eager_scale_out_ends_when_both_workers_have_restored_their_share() -> None:
    half, other = P[:3], P[3:]
    events = [
        ev(1.0, "w1", "assigned", *P),
        ev(10.0, "w1", "revoked", *P),  # the eager rebalance takes everything back
        ev(14.0, "w1", "assigned", *half),  # after w1's restore
        ev(15.5, "w2", "assigned", *other),  # after w2's restore
    ]
    assert migration_end(events, 9.0, ["w1", "w2"], ALL) == 15.5
    assert migration_end(events[:3], 9.0, ["w1", "w2"], ALL) is None


def test_a_cooperative_scale_out_ends_after_its_second_round() -> None:
    moved = P[3:]
    events = [
        ev(1.0, "w1", "assigned", *P),
        ev(10.0, "w1", "revoked", *moved),
        ev(10.0, "w2", "assigned"),  # first round: nothing yet
        ev(13.0, "w1", "assigned"),
        ev(18.0, "w2", "assigned", *moved),
    ]
    assert migration_end(events, 9.0, ["w1", "w2"], ALL) == 18.0


def test_a_scale_in_ends_when_the_remaining_worker_owns_everything_again_and_not_before_the_trigger() -> None:
    events = [
        ev(1.0, "w1", "assigned", *P),  # complete for ["w1"], but before the trigger
        ev(5.0, "w1", "revoked", *P[3:]),
        ev(5.0, "w2", "assigned", *P[3:]),
        ev(20.0, "w2", "revoked", *P[3:]),
        ev(24.0, "w1", "assigned", *P[3:]),
    ]
    assert migration_end(events, 19.0, ["w1"], ALL) == 24.0
    assert ownership(events, 21.0) == {"w1": set(P[:3]), "w2": set()}


def test_with_a_known_target_a_fluid_migration_ends_only_at_its_last_step() -> None:
    moving = P[3:]
    events = [ev(1.0, "w1", "assigned", *P)]
    for i, partition in enumerate(moving):  # one partition per step, each a complete division
        events += [ev(10.0 + i, "w1", "revoked", partition), ev(10.5 + i, "w2", "assigned", partition)]
    target = {"w1": set(P[:3]), "w2": set(moving)}
    assert migration_end(events, 9.0, ["w1", "w2"], ALL) == 10.5  # any division: the first step
    assert migration_end(events, 9.0, ["w1", "w2"], ALL, target) == 10.5 + len(moving) - 1
    assert migration_end(events[:-1], 9.0, ["w1", "w2"], ALL, target) is None


def test_complete_wants_every_partition_exactly_once_and_every_worker_busy() -> None:
    assert complete({"w1": set(P[:3]), "w2": set(P[3:])}, ["w1", "w2"], ALL)
    assert not complete({"w1": set(P), "w2": set()}, ["w1", "w2"], ALL)  # w2 idle
    assert not complete({"w1": set(P), "w2": {P[0]}}, ["w1", "w2"], ALL)  # P[0] twice
    assert not complete({"w1": set(P[:2]), "w2": set(P[3:])}, ["w1", "w2"], ALL)  # P[2] nowhere


event_lists = st.lists(
    st.tuples(
        st.integers(0, 40),
        st.sampled_from(["w1", "w2", "w3"]),
        st.sampled_from(["assigned", "revoked", "lost"]),
        st.frozensets(st.sampled_from(P)),
    ),
    max_size=25,
)


@settings(max_examples=300, deadline=None)
@given(raw=event_lists, trigger=st.integers(0, 40), workers=st.sampled_from([["w1"], ["w1", "w2"]]))
def test_migration_end_is_the_first_complete_replay_at_or_after_the_trigger(
    raw: list[tuple[int, str, str, frozenset[tuple[str, int]]]], trigger: int, workers: list[str]
) -> None:
    events = [OwnershipEvent(float(at), w, kind, parts) for at, w, kind, parts in raw]  # type: ignore[arg-type]
    ordered = sorted(events, key=lambda e: e.at)
    expected = None
    for i, event in enumerate(ordered):
        owners: dict[str, set[tuple[str, int]]] = {}
        for done in ordered[: i + 1]:  # replay the prefix from scratch
            mine = owners.setdefault(done.worker, set())
            mine.update(done.partitions) if done.kind == "assigned" else mine.difference_update(
                done.partitions
            )
        sets = [owners.get(w, set()) for w in workers]
        covered = [p for s in sets for p in s]
        if event.at >= trigger and all(sets) and sorted(covered) == sorted(ALL):
            expected = event.at
            break
    assert migration_end(events, float(trigger), workers, ALL) == expected


# -- BIG's results against the brute force -------------------------------------------------------------


@given(st.lists(st.tuples(st.sampled_from("abc"), st.floats(0, 300, allow_nan=False)), max_size=60))
def test_brute_force_counts_each_record_in_the_window_holding_its_time(
    records: list[tuple[str, float]],
) -> None:
    counts = brute_force_counts(records, 100.0)
    assert sum(counts.values()) == len(records)
    for (key, start), n in counts.items():
        assert start % 100.0 == 0
        assert n == sum(1 for k, ts in records if k == key and start <= ts < start + 100.0)


def test_check_windows_fails_loss_and_strangers_and_counts_what_at_least_once_allows() -> None:
    expected = {("a", 0.0): 3, ("b", 0.0): 1}
    exact = check_windows(expected, [("a", 0.0, 3), ("b", 0.0, 1)])
    assert exact["results_correct"] and exact["results_exact"]
    again = check_windows(expected, [("a", 0.0, 3), ("b", 0.0, 1), ("a", 0.0, 3)])
    assert again["results_correct"] and not again["results_exact"]
    assert again["duplicate_outputs"] == 1
    twice = check_windows(expected, [("a", 0.0, 5), ("b", 0.0, 1)])
    assert twice["results_correct"] and twice["overcounted_records"] == 2 and not twice["results_exact"]
    short = check_windows(expected, [("a", 0.0, 2), ("b", 0.0, 1)])
    assert not short["results_correct"] and short["short_windows"] == 1
    shorter_again = check_windows(expected, [("a", 0.0, 3), ("a", 0.0, 2), ("b", 0.0, 1)])
    assert not shorter_again["results_correct"]
    missing = check_windows(expected, [("a", 0.0, 3)])
    assert not missing["results_correct"] and missing["missing_windows"] == 1
    stranger = check_windows(expected, [("a", 0.0, 3), ("b", 0.0, 1), ("c", 0.0, 1)])
    assert not stranger["results_correct"] and stranger["unexpected_windows"] == 1


def test_compare_input_counts_records_the_topic_lacks_or_holds_twice() -> None:
    sent = {("a", 0.0): 3, ("b", 0.0): 1}
    assert compare_input(sent, sent) == {
        "records_sent": 4,
        "records_in_topic": 4,
        "lost_records": 0,
        "extra_records": 0,
    }
    in_topic = {("a", 0.0): 2, ("b", 0.0): 2, ("c", 0.0): 1}
    assert compare_input(sent, in_topic) == {
        "records_sent": 4,
        "records_in_topic": 5,
        "lost_records": 1,
        "extra_records": 2,
    }


# -- LS scoring ---------------------------------------------------------------------------------------


def test_ls_latency_is_the_first_right_result_after_the_window_end() -> None:
    expected = {("u1", 10.0): 2, ("u2", 10.0): 1, ("u3", 10.0): 1}
    results = [
        LsResult("u1", 10.0, 11.0, 2, 11.25),
        LsResult("u1", 10.0, 11.0, 2, 13.0),  # a duplicate: the first counts
        LsResult("u2", 10.0, 11.0, 7, 11.1),  # wrong count: neither met nor a latency
        LsResult("u9", 10.0, 11.0, 1, 11.1),  # not expected
    ]
    latencies, wrong = ls_latencies(results, expected)
    assert latencies == {("u1", 10.0): pytest.approx(0.25)}
    assert wrong == 1


def test_score_periods_takes_windows_ending_in_the_period_or_the_second_after_and_misses_count() -> None:
    # Windows of 1 s ending at 9, 10, ..., 16; the period is [10, 14.5]: ends 10..15 count.
    expected = [("u", float(start)) for start in range(8, 16)]
    latencies = {key: 0.1 * (i + 1) for i, key in enumerate(expected)}  # 0.1 .. 0.8 s
    del latencies[("u", 12.0)]  # never came
    scored = score_periods(latencies, expected, [(10.0, 14.5)], target=0.45)
    during = [latencies[("u", float(s))] for s in (9, 10, 11, 13, 14)]
    assert scored["ls_windows"] == 6 and scored["ls_missing"] == 1
    assert scored["ls_max_ms"] == pytest.approx(max(during) * 1000)
    assert scored["ls_deadline_met_ratio"] == pytest.approx(sum(1 for x in during if x <= 0.45) / 6, abs=1e-4)
    assert score_periods(latencies, expected, [], target=0.45)["ls_deadline_met_ratio"] is None


def test_back_on_target_is_how_long_late_windows_kept_coming_after_the_end() -> None:
    expected = [("u", float(start)) for start in range(10, 20)]
    latencies = dict.fromkeys(expected, 0.1)
    assert back_on_target(latencies, expected, 12.0, 30.0, 0.3) == 0.0
    latencies[("u", 15.0)] = 2.0  # ends at 16
    latencies.pop(("u", 13.0))  # missing: ends at 14
    assert back_on_target(latencies, expected, 12.0, 30.0, 0.3) == pytest.approx(4.0)
    assert back_on_target(latencies, expected, 12.0, 15.0, 0.3) == pytest.approx(2.0)  # horizon cuts


def test_expected_ls_windows_leave_out_windows_the_input_cannot_close() -> None:
    sends = [("u", 10.2), ("u", 10.7), ("v", 11.5), ("u", 13.9)]
    assert expected_ls_windows(sends, last_ts=13.9) == {("u", 10.0): 2, ("v", 11.0): 1}


# -- the result ------------------------------------------------------------------------------------------


def test_strategy_entry_has_the_issue_figures_and_the_json_shape_is_checked() -> None:
    expected = {("u", float(s)): 1 for s in range(0, 40)}
    latencies = {key: (2.5 if 11.0 <= key[1] <= 14.0 else 0.1) for key in expected}
    big = check_windows({("k", 0.0): 1}, [("k", 0.0, 1)])
    entry = strategy_entry(
        {"scale_out": (12.0, 14.0), "scale_in": (25.0, 26.0)},
        latencies,
        expected,
        big,
        0.3,
        baseline=(2.0, 12.0),
    )
    assert entry["ls_max_ms"] == pytest.approx(2500.0)
    assert entry["duration_s"] == pytest.approx(3.0)
    assert entry["results_correct"] is True
    # windows ending 12..15 and 25..27: 7 windows, those ending 12, 13, 14, 15 (starts 11..14) late
    assert entry["ls_windows_during"] == 7
    assert entry["ls_deadline_met_ratio"] == pytest.approx(3 / 7, abs=1e-4)
    assert entry["ls_p99_before_ms"] == pytest.approx(100.0)
    assert entry["phases"]["scale_out"]["ls_back_on_target_s"] == pytest.approx(1.0)
    assert entry["phases"]["scale_in"]["ls_back_on_target_s"] == 0.0
    unfinished = strategy_entry(
        {"scale_out": (12.0, None)}, latencies, expected, big, 0.3, baseline=(2.0, 12.0)
    )
    assert unfinished["results_correct"] is False and unfinished["duration_s"] is None
    result = {"strategies": {"all_at_once": entry}, "machine": {"cpus": 2}, "commit": "abc"}
    check_shape(json.loads(json.dumps(result)))
    broken_results: list[dict[str, Any]] = [
        {"strategies": {}, "machine": {}},
        {
            "strategies": {"x": {k: v for k, v in entry.items() if k != "ls_p99_ms"}},
            "machine": {},
            "commit": "",
        },
    ]
    for broken in broken_results:
        with pytest.raises(ValueError):
            check_shape(broken)
    assert "all_at_once" in format_table({**result, "skipped": {"fluid": "not built"}})
    assert "fluid        skipped: not built" in format_table({**result, "skipped": {"fluid": "not built"}})


def test_unknown_strategies_are_skipped_with_a_reason_and_known_ones_map_to_workers() -> None:
    chosen, skipped = choose_strategies(["all_at_once", "fluid", "cooperative", "bogus"])
    assert [s.name for s in chosen] == ["all_at_once", "fluid", "cooperative"]
    assert set(skipped) == {"bogus"}
    assert "unknown" in skipped["bogus"]
    assert "--ownership" in STRATEGIES["fluid"].worker_args()
    assert "plan" in STRATEGIES["matching"].worker_args()
    assert STRATEGIES["all_at_once"] == GroupRebalance("all_at_once", "range")
    assert STRATEGIES["all_at_once"].worker_args() == ["--assignment", "range", "--restore-slice", "0.0"]
    cooperative = STRATEGIES["cooperative"].worker_args()
    assert cooperative == ["--assignment", "cooperative-sticky", "--restore-slice", "0.0"]
    background = STRATEGIES["background"].worker_args()  # the worker's default: restores in the background
    assert background[:2] == ["--assignment", "cooperative-sticky"] and float(background[-1]) > 0
