"""``cadenza generate`` through the real broker: what it sends is what the seeded schedule says."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest

from cadenza.loadgen import Bursts, Stream, schedule
from cadenza.settings import KafkaSettings
from cadenza.testing.pytest_plugin import NewTopic
from tests.worker.kafka_io import reading


def generate(settings: KafkaSettings, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CADENZA_BOOTSTRAP_SERVERS": settings.bootstrap_servers}
    return subprocess.run(
        [sys.executable, "-m", "cadenza", "generate", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )


@pytest.mark.kafka
def test_count_run_sends_the_seeded_schedule(kafka_settings: KafkaSettings, new_topic: NewTopic) -> None:
    clicks, orders = new_topic(partitions=2), new_topic(partitions=2)
    count, seed = 300, 42
    result = generate(
        kafka_settings,
        *("--clicks-rate", "2000", "--orders-rate", "200", "--count", str(count), "--seed", str(seed)),
        *("--clicks-topic", clicks, "--orders-topic", orders, "--users", "7", "--burst", "--partitions", "2"),
    )
    assert result.returncode == 0, result.stderr
    assert f"done: sent {count}" in result.stdout
    with reading(kafka_settings, [clicks, orders]) as reader:
        reader.wait_for(lambda got: len(got[clicks]) + len(got[orders]) >= count, timeout=30, what="records")
        reader.settle(0.3)
    expected = schedule(
        [Stream("clicks", 2000, clicks, keys=7), Stream("orders", 200, orders)],
        seed=seed,
        count=count,
        bursts=Bursts(),  # the CLI's burst defaults
    )
    want: dict[str, Counter[str]] = {clicks: Counter(), orders: Counter()}
    for planned in expected:
        key, value = planned.record.encode()
        want[planned.topic][f"{key.decode()} {value.decode()}"] += 1
    got = {
        topic: Counter(f"{(r.key or b'').decode()} {(r.value or b'').decode()}" for r in records)
        for topic, records in reader.records.items()
    }
    # Same records as the pure schedule, except the clicks' event time (it counts from the run's
    # real start): compare clicks without ts, orders in full.
    assert got[orders] == want[orders]
    assert strip_ts(got[clicks]) == strip_ts(want[clicks])


def strip_ts(records: Counter[str]) -> Counter[str]:
    stripped: Counter[str] = Counter()
    for line, n in records.items():
        key, _, value = line.partition(" ")
        fields = json.loads(value)
        assert isinstance(fields.pop("ts"), float)
        stripped[f"{key} {json.dumps(fields, sort_keys=True)}"] += n
    return stripped


@pytest.mark.kafka
def test_sigterm_stops_an_endless_run_cleanly(kafka_settings: KafkaSettings, new_topic: NewTopic) -> None:
    topic = new_topic(partitions=1)
    env = {**os.environ, "CADENZA_BOOTSTRAP_SERVERS": kafka_settings.bootstrap_servers}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cadenza",
            "generate",
            "--orders-rate",
            "0",
            "--clicks-topic",
            topic,
            "--partitions",
            "1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert process.stdout is not None
        assert "cadenza generate at" in process.stdout.readline()
        time.sleep(1.0)
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err
    assert "stopped: sent" in out and "Traceback" not in err


def test_bad_options_are_one_line_errors() -> None:
    settings = KafkaSettings.load(bootstrap_servers="127.0.0.1:9")
    both_zero = generate(settings, "--clicks-rate", "0", "--orders-rate", "0")
    assert both_zero.returncode == 1
    assert "both rates are 0" in both_zero.stderr and "Traceback" not in both_zero.stderr
    bad_alpha = generate(settings, "--burst", "--burst-alpha", "0.9", "--count", "1")
    assert bad_alpha.returncode == 1
    assert "alpha" in bad_alpha.stderr and "Traceback" not in bad_alpha.stderr
