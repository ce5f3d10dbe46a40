"""The pure parts of S3's windowed workload: input, brute-force counts, result parsing, judging, rates."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from bench_throughput import (
    PARTITIONS,
    WINDOWED_SYSTEMS,
    WindowedPlan,
    _judge_windows,
    build_result,
    format_table,
    plot,
    run_rates,
    summarize,
)
from peers.counter import count
from peers.windowed import (
    FLUSH_KEY,
    MAX_OUT_OF_ORDERNESS_MS,
    WINDOW_MS,
    WindowedRecord,
    WindowTally,
    brute_force_counts,
    flush_records,
    make_windowed_records,
    parse_result,
    records_after_first_close,
)
from peers.workload import make_records

BASE = 1_767_225_600_000


def _rec(key: str, timestamp_ms: int, partition: int = 0) -> WindowedRecord:
    return WindowedRecord(key, partition, timestamp_ms, b"{}")


def _systems() -> dict[str, object]:
    return {s.name: s for s in WINDOWED_SYSTEMS}


def test_windowed_records_are_the_map_records_with_an_event_time_sent_to_their_keys_partition() -> None:
    records = make_windowed_records(3000, seed=5, partitions=4)
    assert records == make_windowed_records(3000, seed=5, partitions=4)
    plain = make_records(3000, seed=5)
    partition_of_key: dict[str, int] = {}
    for record, (key, value) in zip(records, plain, strict=True):
        data = json.loads(record.value)
        assert record.key == key.decode() == data["user"]
        assert {k: v for k, v in data.items() if k != "ts"} == json.loads(value)
        assert round(data["ts"] * 1000) == record.timestamp_ms
        assert partition_of_key.setdefault(record.key, record.partition) == record.partition
    assert len(set(partition_of_key.values())) == 4


def test_no_record_is_late_under_the_workloads_out_of_orderness_in_its_partition() -> None:
    newest: dict[int, int] = {}
    for record in make_windowed_records(20_000, seed=9, partitions=4):
        behind = newest.get(record.partition, record.timestamp_ms) - record.timestamp_ms
        assert behind < MAX_OUT_OF_ORDERNESS_MS
        newest[record.partition] = max(newest.get(record.partition, 0), record.timestamp_ms)


def test_flush_records_close_everything_in_every_partition_and_are_not_counted() -> None:
    records = [_rec("a", BASE + 10), _rec("a", BASE + 999), _rec("a", BASE + 1000), _rec("b", BASE + 2500, 1)]
    flushes = flush_records(records, partitions=3)
    assert sorted(f.partition for f in flushes) == [0, 1, 2]
    assert all(f.key == FLUSH_KEY and f.timestamp_ms > BASE + 2500 + WINDOW_MS for f in flushes)
    assert brute_force_counts([*records, *flushes]) == {
        ("a", BASE): 2,
        ("a", BASE + 1000): 1,
        ("b", BASE + 2000): 1,
    }


def test_the_records_counted_are_those_at_or_past_the_first_windows_close_point() -> None:
    close = BASE + WINDOW_MS + MAX_OUT_OF_ORDERNESS_MS
    records = [_rec("a", BASE + 5), _rec("b", close - 1), _rec("a", close), _rec("c", close + 3000)]
    assert records_after_first_close([*records, *flush_records(records, 2)]) == 2
    assert records_after_first_close([]) == 0


def test_parse_result_reads_each_systems_shape() -> None:
    cadenza = json.dumps({"key": "u1", "window_start": 1767225601.0, "window_end": 1767225602.0, "value": 4})
    assert parse_result(b"u1", cadenza.encode()) == ("u1", BASE + 1000, 4)
    assert parse_result(None, cadenza.encode()) == ("u1", BASE + 1000, 4)  # the key in the value
    quix = json.dumps({"start": BASE + 2000, "end": BASE + 3000, "value": 7})
    assert parse_result(b"u2", quix.encode()) == ("u2", BASE + 2000, 7)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (b"u", None),
        (b"u", b"not json"),
        (b"u", b"[1, 2]"),
        (b"u", b'{"value": 3}'),
        (None, b'{"start": 1767225600000, "value": 3}'),
        (b"u", b'{"start": 1767225600000, "value": true}'),
        (b"u", b'{"start": 1767225600000, "value": "3"}'),
        (b"u", b'{"start": 1767225600500, "value": 3}'),
        (b"u", b'{"start": null, "value": 3}'),
        (b"u", b'{"window_start": 1e400, "value": 3}'),
        (b"\xff", b'{"start": 1767225600000, "value": 3}'),
    ],
)
def test_parse_result_refuses_what_is_not_a_window_result(key: bytes | None, value: bytes | None) -> None:
    with pytest.raises(ValueError):
        parse_result(key, value)


def test_a_tally_of_final_results_is_correct_only_if_equal_and_said_once() -> None:
    expected = {("a", BASE): 2, ("b", BASE): 1}
    tally = WindowTally()
    tally.add("a", BASE, 2)
    tally.add(FLUSH_KEY, BASE + 3_600_000, 1)  # ignored
    assert not tally.compare(expected, updates=False)["results_correct"]  # b missing
    tally.add("b", BASE, 1)
    verdict = tally.compare(expected, updates=False)
    assert verdict["results_correct"] and verdict["windows_seen"] == 2 and tally.outputs == 2
    tally.add("b", BASE, 1)
    assert not tally.compare(expected, updates=False)["results_correct"]  # said twice
    assert tally.compare(expected, updates=True)["results_correct"]


def test_a_tally_of_updates_keeps_the_largest_count_and_finds_wrong_and_extra_windows() -> None:
    tally = WindowTally()
    for n in (1, 2, 3):
        tally.add("a", BASE, n)
    tally.read(b"a", b"garbage")
    assert tally.counts == {("a", BASE): 3} and tally.unreadable == 1 and tally.duplicates == 2
    assert not tally.compare({("a", BASE): 3}, updates=True)["results_correct"]  # the unreadable one
    clean = WindowTally.from_json(json.loads(json.dumps(tally.to_json())))
    assert clean.counts == tally.counts and clean.unreadable == 1
    clean.unreadable = 0
    clean.add("z", BASE, 1)
    verdict = clean.compare({("a", BASE): 4, ("b", BASE): 1}, updates=True)
    assert (verdict["windows_missing"], verdict["windows_extra"], verdict["windows_wrong"]) == (1, 1, 1)
    assert not verdict["results_correct"] and len(verdict["examples"]) == 3


def test_the_plan_expects_a_result_per_window_or_an_update_per_record(tmp_path: Path) -> None:
    records = make_windowed_records(12_000, seed=3, partitions=PARTITIONS)
    plan = WindowedPlan.of(records)
    systems = _systems()
    assert plan.counter_expects(systems["cadenza"]) == len(plan.expected) < len(records)  # type: ignore[arg-type]
    assert plan.counter_expects(systems["faust"]) == len(records)  # type: ignore[arg-type]
    assert 0 < plan.counted < len(records)
    tally = WindowTally()
    for (key, start), n in plan.expected.items():
        tally.add(key, start, n)
    path = tmp_path / "tally.json"
    path.write_text(json.dumps(tally.to_json()))
    judged = _judge_windows(plan, systems["quixstreams"], path)  # type: ignore[arg-type]
    assert judged["results_correct"] and judged["results_mode"] == "final"
    missing = _judge_windows(plan, systems["quixstreams"], tmp_path / "absent.json")  # type: ignore[arg-type]
    assert missing["results_correct"] is False and "results_error" in missing


def test_a_windowed_rate_counts_the_given_records_over_first_to_last_result() -> None:
    rates = run_rates(50, 10.0, 14.0, 1.0, 3.0, counted=8000)
    assert rates["rps"] == pytest.approx(2000.0)
    assert rates["rps_per_cpu_s"] == pytest.approx(4000.0)
    with pytest.raises(ValueError):
        run_rates(50, 10.0, 14.0, None, None, counted=0)


def test_the_windowed_result_leaves_the_raw_loop_out_and_is_correct_only_if_every_run_was(
    tmp_path: Path,
) -> None:
    good: dict[str, Any] = {"rps": 100.0, "rps_per_cpu_s": 120.0, "results_correct": True}
    bad: dict[str, Any] = {"rps": 90.0, "rps_per_cpu_s": 100.0, "results_correct": False}
    failed: dict[str, Any] = {"repetition": 1, "error": "timed out", "results_correct": False}
    assert summarize([good, good])["results_correct"] is True
    assert summarize([good, bad])["results_correct"] is False
    assert "results_correct" not in summarize([{"rps": 1.0, "rps_per_cpu_s": 1.0}])  # the map workload
    runs = {"cadenza": [good], "quixstreams": [bad], "faust": [failed]}
    result = build_result(runs, {"commit": "abc"}, {"records": 10, "repetitions": 1}, "windowed")
    assert result["benchmark"] == "throughput-windowed" and "raw" in result["left_out"]
    assert set(result["ratios"]) == {"cadenza_over_faust", "cadenza_over_quixstreams"}
    assert result["ratios"]["cadenza_over_quixstreams"] == pytest.approx(100.0 / 90.0, abs=1e-3)
    assert result["systems"]["faust"]["results_correct"] is False
    table = format_table(result)
    assert "results correct: False" in table and "results correct: True" in table
    assert plot(result, tmp_path / "w.png").read_bytes().startswith(b"\x89PNG")


def test_a_windowed_count_without_a_tally_is_refused() -> None:
    with pytest.raises(ValueError):
        count("127.0.0.1:1", "t", 1, 1, 0.1, windowed="final")
