"""The compose scenario without Docker: two ``cadenza worker`` processes, one group, the clicks example.

Both workers run ``examples/clicks_per_user.py`` unchanged as subprocesses against the test broker;
load comes from :mod:`cadenza.loadgen`. Checked: both workers get partitions; every window count
equals an independent count of the generated clicks; SIGTERM makes a worker exit 0 within a bound
(measured); the other takes its partitions over and the results stay complete.

The example's topics have fixed names, so this run's clicks use their own user prefix and only
those keys are compared. Before the load, every source partition gets a few records for many keys,
so each window partition has heard from every upstream partition (its watermark is the minimum
over those heard) and no generated click can be late; at the end, records far ahead in event time
close every window.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from cadenza.infra.broker.embedded import free_port
from cadenza.loadgen import HEALTH_PAGE, LoadPlan, Planned, Stream, produce_planned
from cadenza.settings import KafkaSettings
from tests.worker.kafka_io import Outgoing, produce, reading

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(120)]

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "clicks_per_user.py"
SOURCE, SINK, LATE = "clicks", "clicks-per-user", "clicks-per-user.late"
PARTITIONS = 4
RATE = 250.0
SPREAD_KEYS = 48  # keys per source partition for the warm-up and the final flush
SIGTERM_BOUND = 15.0
_TOPIC_PARTITION = re.compile(r"([A-Za-z0-9._-]+)\[(\d+)\]")


class WorkerProcess:
    """A ``cadenza worker`` subprocess whose assignment is followed through its JSON log lines."""

    def __init__(self, name: str, settings: KafkaSettings, group: str) -> None:
        self.name = name
        env = {
            **os.environ,
            "CADENZA_BOOTSTRAP_SERVERS": settings.bootstrap_servers,
            "CADENZA_SESSION_TIMEOUT_MS": "3000",
            "CADENZA_LOG_LEVEL": "INFO",
            "CADENZA_LOG_FORMAT": "json",
            "CADENZA_GROUP": group,
            "CADENZA_METRICS_PORT": str(free_port()),
        }
        self.process = subprocess.Popen(
            [sys.executable, "-m", "cadenza", "worker", str(EXAMPLE), "--group", group],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=ROOT,
        )
        self.lines: list[str] = []
        self._assignment: set[tuple[str, int]] = set()
        self._lock = threading.Lock()
        assert self.process.stdout is not None and self.process.stderr is not None
        for stream in (self.process.stdout, self.process.stderr):
            threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream: object) -> None:
        assert hasattr(stream, "readline")
        for line in iter(stream.readline, ""):
            try:
                message = str(json.loads(line).get("message", ""))
            except (ValueError, AttributeError):
                message = line.strip()
            with self._lock:
                self.lines.append(line.rstrip())
                verb, _, rest = message.partition(" ")
                partitions = {(t, int(p)) for t, p in _TOPIC_PARTITION.findall(rest)}
                if verb == "assigned":
                    self._assignment |= partitions
                elif verb in ("revoked", "lost"):
                    self._assignment -= partitions

    @property
    def assignment(self) -> set[tuple[str, int]]:
        with self._lock:
            return set(self._assignment)

    def wait_for(self, what: str, done: object, timeout: float) -> None:
        assert callable(done)
        deadline = time.monotonic() + timeout
        while not done():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"{self.name}: timed out waiting for {what}; log:\n{self.log()}")
            time.sleep(0.1)

    def log(self) -> str:
        with self._lock:
            return "\n".join(self.lines[-40:])

    def terminate(self) -> tuple[int, float]:
        """SIGTERM; (exit code, seconds to exit)."""
        started = time.monotonic()
        self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(timeout=60)
        return code, time.monotonic() - started

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


def click(user: str, ts: float) -> bytes:
    return json.dumps({"user": user, "page": "/", "ts": ts}).encode()


def spread(settings: KafkaSettings, prefix: str, ts: float) -> None:
    """Records for many keys into every source partition, all at event time ``ts``."""
    records: list[Outgoing] = [
        (f"{prefix}{p}-{k}".encode(), click(f"{prefix}{p}-{k}", ts), p)
        for p in range(PARTITIONS)
        for k in range(SPREAD_KEYS)
    ]
    produce(settings, SOURCE, records)


def collect(plan: LoadPlan, settings: KafkaSettings, sent: list[Planned]) -> None:
    """Produce the plan with loadgen's producing loop and remember what it sent (for the count)."""
    epoch, start = time.time(), time.monotonic()
    planned = list(plan.schedule(epoch))  # finite: the plan has a duration
    stats = produce_planned(settings, planned, start=start, end=plan.duration)
    assert stats.total == len(planned) and stats.delivered == len(planned)
    sent.extend(planned)


def test_two_worker_processes_share_the_example_and_survive_a_sigterm(kafka_settings: KafkaSettings) -> None:
    run = uuid.uuid4().hex[:8]
    prefix, group = f"u{run}-", f"cadenza-procs-{run}"
    stream = Stream("clicks", RATE, SOURCE, keys=16, key_prefix=prefix, health_share=0.1)
    sent: list[Planned] = []
    first = WorkerProcess("first", kafka_settings, group)
    second: WorkerProcess | None = None
    try:
        first.wait_for("its first partitions", lambda: first.assignment, timeout=30)
        second = WorkerProcess("second", kafka_settings, group)
        both = second
        both.wait_for(
            "the group to share the partitions",
            lambda: first.assignment and both.assignment and not first.assignment & both.assignment,
            timeout=30,
        )
        owned = first.assignment | second.assignment
        inputs = {topic for topic, _ in owned}
        assert SOURCE in inputs and len(inputs) >= 2, owned  # the source and the window's repartition topic
        spread(kafka_settings, f"warm{run}-", time.time() - 5)
        collect(LoadPlan((stream,), seed=1, duration=3.0), kafka_settings, sent)

        code, took = second.terminate()
        assert code == 0, f"SIGTERM exit code {code}; log:\n{second.log()}"
        assert took < SIGTERM_BOUND, f"took {took:.1f}s to stop after SIGTERM"
        print(f"\nworker stopped {took:.2f}s after SIGTERM")  # the measurement, shown with -s
        first.wait_for("the partitions of the stopped worker", lambda: first.assignment >= owned, timeout=30)

        collect(LoadPlan((stream,), seed=2, duration=2.0), kafka_settings, sent)
        spread(kafka_settings, f"flush{run}-", max(p.record.value["ts"] for p in sent) + 1000)

        want: Counter[tuple[str, float]] = Counter(
            (p.record.key, float(math.floor(p.record.value["ts"])))
            for p in sent
            if p.record.value["page"] != HEALTH_PAGE
        )
        assert any(p.record.value["page"] == HEALTH_PAGE for p in sent)  # the filter is exercised
        got: defaultdict[tuple[str, float], set[int]] = defaultdict(set)

        def results() -> dict[tuple[str, float], set[int]]:
            got.clear()
            for record in reader.records[SINK]:
                value = json.loads(record.value or b"")
                if str(value["key"]).startswith(prefix):
                    got[(value["key"], float(value["window_start"]))].add(int(value["value"]))
            return got

        with reading(kafka_settings, [SINK, LATE]) as reader:
            reader.wait_for(lambda _: results().keys() >= want.keys(), timeout=30, what="every window")
            reader.settle(0.5)
            results()
            late = [r for r in reader.records[LATE] if (r.key or b"").decode().startswith(prefix)]
        assert not late, f"{len(late)} generated clicks went to the late topic"
        assert set(got) == set(want)
        wrong = {k: (v, want[k]) for k, v in got.items() if v != {want[k]}}
        assert not wrong, f"windows with counts that differ from the independent count: {wrong}"
        code, _ = first.terminate()
        assert code == 0, first.log()
    finally:
        for worker in (first, second):
            if worker is not None:
                worker.kill()
