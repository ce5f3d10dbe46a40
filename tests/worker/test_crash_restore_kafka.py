"""A worker process killed mid-stream (SIGKILL) and restarted still produces every window result, with
the right values: state comes back from the changelog, replayed input is not counted twice.

Two pipelines read one source topic, so both state paths are covered:

- ``direct``: a keyed source (partitioned by sensor) windowed without a repartition; small
  out-of-orderness, so windows close (and are emitted, and deleted from state) all along the run,
  and some records are late. Deterministic per partition, so a brute force gives the exact results.
- ``rekeyed``: key_by -> repartition topic -> window, with out-of-orderness so large that windows
  close only at the final record: at the kill every window is open state that must be restored,
  and records the killed worker had already written to the repartition topic are written again by
  its successor and must not be counted twice.

Duplicated result records are allowed (at-least-once output) and counted; wrong or missing ones fail.
The workers keep state in the RocksDB store under one state directory (each worker instance in a
directory of its own there), so the restore path into RocksDB is the one exercised.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path

import pytest

from cadenza.settings import KafkaSettings
from cadenza.testing.pytest_plugin import NewTopic
from tests.worker.kafka_io import Outgoing, Reader, Record, produce

pytestmark = [
    pytest.mark.kafka,
    pytest.mark.slow("SIGKILLs a worker process and restarts it; the restart restores from the changelog"),
]

SENSORS = 10
PARTITIONS = 2
EVENTS = 16_000
SPACING = 0.01  # event seconds between consecutive events
DIRECT_OOO = 0.5
LATENESS = 0.25
REKEYED_OOO = 10_000.0
FLUSH_TS = 1_000_000.0

PIPELINE_MODULE = f'''
"""Pipelines of the crash test; topic and pipeline names come from the environment."""

import os
import time

from pydantic import BaseModel

from cadenza.pipelines import Pipeline, Tumbling


class Reading(BaseModel):
    sensor: str
    ts: float


def sensor_of(reading: Reading) -> str:
    return reading.sensor


def slowly(reading: Reading) -> Reading:
    # Keeps the worker busy, so the kill lands in the middle of a batch rather than between two.
    time.sleep(0.0001)
    return reading


SOURCE = os.environ["CRASH_SOURCE"]
PREFIX = os.environ["CRASH_PREFIX"]

direct = Pipeline(PREFIX + "-direct", tenant="iot", latency_target="1s")
(
    direct.source(SOURCE, value=Reading, key=str, timestamp="ts", max_out_of_orderness={DIRECT_OOO})
    .map(slowly)
    .window(Tumbling("1s"), allowed_lateness={LATENESS})
    .count()
    .sink(os.environ["CRASH_DIRECT_OUT"])
)

rekeyed = Pipeline(PREFIX + "-rekeyed", tenant="iot", latency_target="1s")
(
    rekeyed.source(SOURCE, value=Reading, timestamp="ts", max_out_of_orderness={REKEYED_OOO})
    .map(slowly)
    .key_by(sensor_of)
    .window(Tumbling("2s"))
    .count()
    .sink(os.environ["CRASH_REKEYED_OUT"])
)
'''

Result = tuple[str, float, float, int]


def make_input() -> list[tuple[str, float, int]]:
    """(sensor, event time, partition): increasing time with jitter, every 97th record 3 s late."""
    rows: list[tuple[str, float, int]] = []
    for i in range(EVENTS):
        sensor = i % SENSORS
        jitter = -3.0 if i % 97 == 50 else ((i * 7) % 5 - 2) * 0.1
        rows.append((f"s{sensor}", round(max(0.0, i * SPACING + jitter), 2), sensor % PARTITIONS))
    return rows


def expected_direct(rows: list[tuple[str, float, int]]) -> set[Result]:
    """Per partition, in order: late if window end + lateness <= (max event time so far - ooo)."""
    results: set[Result] = set()
    for partition in range(PARTITIONS):
        counts: Counter[tuple[str, float, float]] = Counter()
        watermark = newest = -math.inf
        for sensor, ts, p in [*rows, *flush_rows()]:
            if p != partition:
                continue
            start = math.floor(ts)
            if start + 1.0 + LATENESS > watermark:
                counts[(sensor, start, start + 1.0)] += 1
            newest = max(newest, ts)
            watermark = newest - DIRECT_OOO
        results.update((s, a, b, n) for (s, a, b), n in counts.items() if b + LATENESS <= watermark)
    return results


def expected_rekeyed(rows: list[tuple[str, float, int]]) -> set[Result]:
    counts: Counter[tuple[str, float, float]] = Counter()
    for sensor, ts, _ in rows:
        start = math.floor(ts / 2.0) * 2.0
        counts[(sensor, start, start + 2.0)] += 1
    return {(s, a, b, n) for (s, a, b), n in counts.items()}


def flush_rows() -> list[tuple[str, float, int]]:
    # Enough keys that, after the repartition, every partition sees one and its watermark passes all.
    return [(f"~flush-{k}", FLUSH_TS, k % PARTITIONS) for k in range(32)]


def encode(rows: list[tuple[str, float, int]]) -> list[Outgoing]:
    return [(s.encode(), json.dumps({"sensor": s, "ts": ts}).encode(), p) for s, ts, p in rows]


def results(records: list[Record]) -> Counter[Result]:
    found: Counter[Result] = Counter()
    for record in records:
        value = json.loads(record.value or b"")
        if not value["key"].startswith("~flush"):
            found[(value["key"], value["window_start"], value["window_end"], value["value"])] += 1
    return found


class WorkerProcess:
    def __init__(self, module: Path, group: str, env: dict[str, str], log: Path) -> None:
        self.log = log
        with log.open("ab") as out:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "cadenza",
                    "worker",
                    str(module),
                    "--group",
                    group,
                    "--log-level",
                    "INFO",
                ],
                cwd=module.parent,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def alive(self) -> None:
        code = self.process.poll()
        assert code is None, f"the worker exited with {code}:\n{self.log.read_text()[-3000:]}"

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def terminate(self, timeout: float = 30.0) -> int:
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
            raise AssertionError(f"the worker ignored SIGTERM for {timeout:.0f}s") from None


def wait_until(
    reader: Reader,
    done: Callable[[], bool],
    worker: WorkerProcess,
    timeout: float,
    what: str | Callable[[], str],
) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        worker.alive()
        if time.monotonic() > deadline:
            detail = what() if callable(what) else what
            raise AssertionError(
                f"timed out after {timeout:.0f}s waiting for {detail}:\n{worker.log.read_text()[-3000:]}"
            )
        reader.poll(0.2)


def test_killed_worker_restarts_from_the_changelog_and_completes_every_window(
    kafka_settings: KafkaSettings,
    new_topic: NewTopic,
    tmp_path: Path,
    record_property: Callable[[str, object], None],
) -> None:
    source, direct_out, rekeyed_out = new_topic(partitions=PARTITIONS), new_topic(), new_topic()
    prefix = f"crash-{uuid.uuid4().hex[:6]}"
    module = tmp_path / "crash_pipelines.py"
    module.write_text(PIPELINE_MODULE)
    env = {
        **os.environ,
        "CADENZA_BOOTSTRAP_SERVERS": kafka_settings.bootstrap_servers,
        "CADENZA_SESSION_TIMEOUT_MS": "3000",
        # The RocksDB store, restored from the changelog; the other window tests use the memory store.
        "CADENZA_STATE_STORE": "rocksdb",
        "CADENZA_STATE_DIR": str(tmp_path / "state"),
        "CRASH_SOURCE": source,
        "CRASH_PREFIX": prefix,
        "CRASH_DIRECT_OUT": direct_out,
        "CRASH_REKEYED_OUT": rekeyed_out,
    }
    rows = make_input()
    want_direct, want_rekeyed = expected_direct(rows), expected_rekeyed(rows)
    group, log = f"g-{prefix}", tmp_path / "worker.log"

    # The input streams in while the first worker runs; it is killed once results are flowing.
    produce(kafka_settings, source, encode(rows[:2000]))
    first = WorkerProcess(module, group, env, log)

    def stream_rest() -> None:
        rest = encode(rows[2000:])
        for start in range(0, len(rest), 2000):
            produce(kafka_settings, source, rest[start : start + 2000])

    producer = threading.Thread(target=stream_rest, daemon=True)
    reader = Reader(kafka_settings, [direct_out, rekeyed_out])
    try:
        wait_until(reader, lambda: len(reader.records[direct_out]) >= 50, first, 60, "the first results")
        producer.start()
        wait_until(reader, lambda: len(reader.records[direct_out]) >= 400, first, 60, "more results")
        first.kill()
        killed_at = len(reader.records[direct_out])
        producer.join(60)
        produce(kafka_settings, source, encode(flush_rows()))

        second = WorkerProcess(module, group, env, log)
        try:
            wait_until(
                reader,
                lambda: (
                    set(results(reader.records[direct_out])) >= want_direct
                    and set(results(reader.records[rekeyed_out])) >= want_rekeyed
                ),
                second,
                90,
                lambda: (
                    "every window result after the restart; missing direct "
                    + repr(sorted(want_direct - set(results(reader.records[direct_out])))[:10])
                    + " wrong direct "
                    + repr(sorted(set(results(reader.records[direct_out])) - want_direct)[:10])
                    + " missing rekeyed "
                    + repr(sorted(want_rekeyed - set(results(reader.records[rekeyed_out])))[:10])
                    + " wrong rekeyed "
                    + repr(sorted(set(results(reader.records[rekeyed_out])) - want_rekeyed)[:10])
                ),
            )
        finally:
            code = second.terminate()
        assert code == 0, f"SIGTERM should stop the worker cleanly:\n{log.read_text()[-3000:]}"
        reader.settle(1.0)
    finally:
        reader.close()

    direct, rekeyed = results(reader.records[direct_out]), results(reader.records[rekeyed_out])
    assert set(direct) == want_direct  # nothing missing, and no window with a wrong count
    assert set(rekeyed) == want_rekeyed
    text = log.read_text()
    duplicates = sum(direct.values()) - len(direct) + sum(rekeyed.values()) - len(rekeyed)
    record_property("results_before_kill", killed_at)
    record_property("duplicate_results", duplicates)
    print(f"results before the kill: {killed_at}; duplicated results after the restart: {duplicates}")
    print(" ".join(text[text.rfind("stopped:") :].split()))
    assert "restored" in text, "the second worker should have restored state from the changelog"
    per_window: defaultdict[tuple[str, float], int] = defaultdict(int)
    for sensor, start, _end, _n in direct:
        per_window[(sensor, start)] += 1
    assert max(per_window.values()) == 1  # one count per window, however often it was emitted
