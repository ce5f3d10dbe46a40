"""``cadenza analyze`` over a trace in the real broker: tables, JSON, PNG and the published summaries."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from cadenza.analysis import Activity, WindowSummary, top, window_summaries
from cadenza.analysis.trace import encode_batch
from cadenza.settings import KafkaSettings
from cadenza.testing.pytest_plugin import NewTopic
from tests.analysis.test_summary import straggler_trace
from tests.worker.kafka_io import produce, reading

pytestmark = pytest.mark.kafka


def test_analyze_a_time_range(kafka_settings: KafkaSettings, new_topic: NewTopic, tmp_path: Path) -> None:
    activities, feedback = new_topic(), new_topic()
    base = 1_700_000_000.0  # a window-aligned epoch, so windows start where the trace does
    trace = [
        Activity(a.worker, a.start + base, a.end + base, a.kind, a.operator, a.to_worker, a.topic)
        for a in straggler_trace("w1", "w2", 10)
    ]
    batches: list[tuple[bytes | None, bytes | None, int | None]] = []
    for worker in ("w1", "w2"):
        # What each worker records: its own timeline and the messages it received.
        own = [a for a in trace if (a.to_worker or a.worker) == worker]
        batches += [
            (worker.encode(), encode_batch(worker, own[k : k + 7]), None) for k in range(0, len(own), 7)
        ]
    batches.append((b"w3", b"\x01garbage", None))
    # Overlapping activities after the straggler trace: that window is skipped, naming the problem.
    overlapping = [
        Activity("w1", base + 41, base + 43, "processing"),
        Activity("w1", base + 42, base + 44, "buffer"),
    ]
    batches.append((b"w1", encode_batch("w1", overlapping), None))
    produce(kafka_settings, activities, batches)
    json_out, png = tmp_path / "cp.json", tmp_path / "cp.png"
    env = {**os.environ, "CADENZA_BOOTSTRAP_SERVERS": kafka_settings.bootstrap_servers, "COLUMNS": "200"}
    args = ["--topic", activities, "--window", "8s", "--from", str(base), "--to", str(base + 48)]
    args += ["--json", str(json_out), "--png", str(png), "--feedback-topic", feedback]
    result = subprocess.run(
        [sys.executable, "-m", "cadenza", "analyze", *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"1 of {len(batches)} batches did not decode" in result.stdout
    assert "window at 1700000040.000 skipped: overlapping activities on worker 'w1'" in result.stdout
    assert "CP share" in result.stdout and "w1 -> w2 via mid" in result.stdout
    got = [WindowSummary.from_json(s) for s in json.loads(json_out.read_text())]
    expected = window_summaries(trace, base, base + 40, 8.0)
    assert len(got) == len(expected) == 5
    for g, e in zip(got, expected, strict=True):
        assert g.start == e.start and g.paths == e.paths
        assert g.by_worker == pytest.approx(e.by_worker, abs=1e-6)
        assert g.by_kind == pytest.approx(e.by_kind, abs=1e-6)
        assert g.by_channel == pytest.approx(e.by_channel, abs=1e-6)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with reading(kafka_settings, [feedback]) as reader:
        reader.wait_for(lambda r: len(r[feedback]) >= 5, timeout=30, what="published summaries")
    published = reader.records[feedback]
    assert published[0].headers.get("cadenza-kind") == b"critical-participation"
    assert [json.loads(r.value or b"")["start"] for r in published] == [s.start for s in expected]


def _analyze(kafka_settings: KafkaSettings, *args: str) -> subprocess.CompletedProcess[str]:
    """``cadenza analyze ARGS`` against the test broker, as a user would run it."""
    env = {**os.environ, "CADENZA_BOOTSTRAP_SERVERS": kafka_settings.bootstrap_servers, "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "cadenza", "analyze", *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def test_analyze_a_missing_topic_is_a_clear_error(kafka_settings: KafkaSettings) -> None:
    result = _analyze(kafka_settings, "--topic", "no-such-activities", "--no-publish")
    assert result.returncode == 1
    assert "activities topic 'no-such-activities' does not exist" in result.stdout + result.stderr


@pytest.mark.parametrize("engine", [[], ["--spark"]], ids=["kafka", "spark"])
def test_analyze_a_range_ending_before_it_starts_is_refused(
    kafka_settings: KafkaSettings, new_topic: NewTopic, engine: list[str]
) -> None:
    args = ["--topic", new_topic(), "--from", "1700000100", "--to", "1700000050", "--no-publish", *engine]
    result = _analyze(kafka_settings, *args)
    assert result.returncode == 1
    assert "--to (1700000050.0) must be after --from (1700000100.0)" in result.stdout + result.stderr


@pytest.mark.parametrize("stop_signal", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_analyze_follow_reports_windows_as_they_close(
    kafka_settings: KafkaSettings, new_topic: NewTopic, tmp_path: Path, stop_signal: signal.Signals
) -> None:
    activities = new_topic()
    json_out = tmp_path / "follow.json"
    env = {**os.environ, "CADENZA_BOOTSTRAP_SERVERS": kafka_settings.bootstrap_servers, "COLUMNS": "200"}
    args = ["--topic", activities, "--follow", "--window", "1s", "--grace", "0.5s", "--from", "-1s"]
    # A shell that runs a job in the background without job control (CI scripts, `make ... &`) starts
    # it with SIGINT ignored, a disposition exec passes on; Python then installs no Ctrl-C handler in
    # the child and the Ctrl-C below would be lost. A handled SIGINT here is reset to the default in it.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "cadenza", "analyze", *args, "--json", str(json_out), "--no-publish"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
    finally:
        signal.signal(signal.SIGINT, previous)
    stdout, stderr = process.stdout, process.stderr
    assert stdout is not None and stderr is not None
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(stdout.readline, "")), daemon=True)
    reader.start()
    try:
        # A slow worker and a waiting one, in live time, batch by batch as workers send them, until the
        # command has reported three windows (however long it took to start), then Ctrl-C or a
        # container's SIGTERM, which ends the run with the windows reported so far.
        until = time.monotonic() + 90
        while sum("CP share" in line for line in lines) < 3 and time.monotonic() < until:
            now = time.time()
            slow = [Activity("slow", now - 0.5, now, "processing", "heavy")]
            idle = [
                Activity("idle", now - 0.5, now - 0.4, "processing", "light"),
                Activity("idle", now - 0.4, now, "waiting"),
            ]
            produce(
                kafka_settings,
                activities,
                [(b"slow", encode_batch("slow", slow), None), (b"idle", encode_batch("idle", idle), None)],
            )
            time.sleep(0.5)
        process.send_signal(stop_signal)
        process.wait(timeout=60)
        reader.join(10)
        out, err = "".join(lines), stderr.read()
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, out + err
    summaries = [WindowSummary.from_json(s) for s in json.loads(json_out.read_text())]
    assert summaries, out
    assert "CP share" in out
    for s in summaries:
        assert s.end - s.start == pytest.approx(1.0)
    assert any(top(s.by_worker, 1)[0][0] == "slow" and s.paths > 0 for s in summaries)
