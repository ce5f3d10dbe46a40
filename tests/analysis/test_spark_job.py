"""The Spark analysis gives the in-process summaries on the same trace (real broker, real PySpark)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from cadenza.analysis import Activity, WindowSummary, window_summaries
from cadenza.analysis.spark_job import spark_window_summaries, windows_touched
from cadenza.analysis.trace import decode_batch, encode_batch
from cadenza.settings import KafkaSettings
from cadenza.testing.pytest_plugin import NewTopic
from tests.analysis.test_summary import straggler_trace
from tests.infra.spark.kafka_helpers import produce

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

WORKERS = ["w1", "w2", "w3"]
KINDS = ["processing", "serialization", "deserialization", "scheduling", "buffer", "waiting"]


def random_trace(rng: random.Random, begin: float, end: float) -> list[Activity]:
    """Each worker's timeline: activities with gaps, and messages between workers (sent before received)."""
    trace: list[Activity] = []
    for worker in WORKERS:
        t = begin - 0.5
        while t < end + 0.5:
            t += rng.choice([0.0, 0.05, 0.2])
            length = rng.uniform(0.05, 0.8)
            kind = rng.choice(KINDS)
            operator = rng.choice(["parse", "join"]) if kind == "processing" else None
            trace.append(Activity(worker, t, t + length, kind, operator))
            t += length
    for _ in range(25):
        sender, receiver = rng.sample(WORKERS, 2)
        sent = rng.uniform(begin - 0.3, end)
        trace.append(
            Activity(sender, sent, sent + rng.uniform(0.01, 0.4), "message", None, receiver, "t-rep")
        )
    return trace


def assert_same(spark_side: list[WindowSummary], local: list[WindowSummary]) -> None:
    assert [(s.start, s.end, s.paths) for s in spark_side] == [(s.start, s.end, s.paths) for s in local]
    for got, want in zip(spark_side, local, strict=True):
        for field in ("by_kind", "by_worker", "by_operator", "by_channel"):
            a, b = getattr(got, field), getattr(want, field)
            assert a.keys() == b.keys(), field
            for key in b:
                assert a[key] == pytest.approx(b[key], abs=1e-9), (field, key)


@pytest.mark.slow("a Spark job over a trace recorded from real workers")
@pytest.mark.kafka
def test_spark_and_in_process_analysis_give_the_same_summaries(
    spark: SparkSession, kafka_settings: KafkaSettings, new_topic: NewTopic, tmp_path: Path
) -> None:
    rng = random.Random(19)
    begin, width, end = 1_700_000_000.0, 2.0, 1_700_000_011.0  # the last window is cut short
    trace = random_trace(rng, begin, end)
    topic = new_topic()
    records: list[tuple[int, bytes | None, bytes, list[tuple[str, bytes]]]] = []
    for worker in WORKERS:
        own = [a for a in trace if (a.to_worker or a.worker) == worker]
        for i in range(0, len(own), 7):  # several batches per worker, as the recorder sends them
            records.append((0, worker.encode(), encode_batch(worker, own[i : i + 7]), []))
    records.append((0, b"junk", b"\x00\xffnot avro", []))
    produce(kafka_settings, topic, records, batched=True)

    # The trace as it travels (microsecond times), analysed in process.
    decoded = [a for _, _, value, _ in records[:-1] for a in decode_batch(value)]
    local = window_summaries(decoded, begin, end, width, workers=WORKERS)

    result = spark_window_summaries(
        spark, kafka_settings, topic, begin=begin, end=end, width=width, workdir=tmp_path
    )
    assert result.bad_batches == 1
    assert result.skipped == {}
    assert len(result.summaries) == 6
    assert any(s.by_channel for s in result.summaries)
    assert_same(result.summaries, local)


def test_windows_touched_matches_a_scan_of_every_window() -> None:
    """The window arithmetic against checking every window with the in-process rule."""
    rng = random.Random(7)
    begin, width, end = 10.0, 1.5, 20.0
    windows = [(begin + k * width, min(begin + (k + 1) * width, end)) for k in range(7)]
    for _ in range(2000):
        start = rng.choice([rng.uniform(5, 25), begin + width * rng.randint(-2, 9)])
        stop = start + rng.choice([0.0, rng.uniform(0, 4), width])
        message = rng.random() < 0.5
        a = Activity("a", start, stop, "message" if message else "processing", None, "b" if message else None)
        if message:
            brute = [k for k, (lo, hi) in enumerate(windows) if lo <= start <= hi or lo <= stop <= hi]
        else:
            brute = [k for k, (lo, hi) in enumerate(windows) if start < hi and lo < stop]
        assert windows_touched(a, begin, width, end) == brute


@pytest.mark.slow("runs `cadenza analyze --spark` in a subprocess, which starts a JVM of its own")
@pytest.mark.kafka
def test_cadenza_analyze_spark_reports_what_the_in_process_command_reports(
    kafka_settings: KafkaSettings, new_topic: NewTopic, tmp_path: Path
) -> None:
    """The same straggler trace as the in-process CLI test, through ``cadenza analyze --spark``."""
    topic = new_topic()
    base = 1_700_000_000.0
    trace = [
        Activity(a.worker, a.start + base, a.end + base, a.kind, a.operator, a.to_worker, a.topic)
        for a in straggler_trace("w1", "w2", 10)
    ]
    records: list[tuple[int, bytes | None, bytes, list[tuple[str, bytes]]]] = []
    for worker in ("w1", "w2"):
        own = [a for a in trace if (a.to_worker or a.worker) == worker]
        records += [
            (0, worker.encode(), encode_batch(worker, own[k : k + 7]), []) for k in range(0, len(own), 7)
        ]
    records.append((0, b"w3", b"\x01garbage", []))
    overlapping = [
        Activity("w1", base + 41, base + 43, "processing"),
        Activity("w1", base + 42, base + 44, "buffer"),
    ]
    records.append((0, b"w1", encode_batch("w1", overlapping), []))
    produce(kafka_settings, topic, records, batched=True)
    json_out = tmp_path / "cp.json"
    env = {**os.environ, "CADENZA_BOOTSTRAP_SERVERS": kafka_settings.bootstrap_servers, "COLUMNS": "200"}
    args = ["--topic", topic, "--window", "8s", "--from", str(base), "--to", str(base + 48)]
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "cadenza",
            "analyze",
            "--spark",
            "--no-publish",
            "--json",
            str(json_out),
            *args,
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 batches did not decode" in result.stdout
    assert "window at 1700000040.000 skipped: overlapping activities on worker 'w1'" in result.stdout
    got = [WindowSummary.from_json(s) for s in json.loads(json_out.read_text())]
    assert_same(got, window_summaries(trace, base, base + 40, 8.0))
