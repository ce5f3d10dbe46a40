"""The compose scenario without Docker: two ``cadenza worker`` processes, one group, the clicks example.

Both workers run ``examples/clicks_per_user.py`` unchanged as subprocesses against the test broker;
load comes from :mod:`cadenza.loadgen`. Checked: both workers get partitions; every window count
equals an independent count of the generated clicks; SIGTERM makes a worker exit 0 within a bound
(measured); the other takes its partitions over and the results stay complete. The session timeout
is 30 s and the takeover must come within 25 s of the SIGTERM: the stopped worker's last heartbeat
was at most one heartbeat interval (5 s) before it, so no broker can have expired its session by
then, and the takeover shows the worker *left* the group. (The embedded broker makes every group join
take about half the session timeout, so a leave is taken over in 15 to 20 s here, an expiry in
about 45 s.)

Readiness, over HTTP against a running worker: ``/readyz`` answers 503 until the worker has joined
its group (the embedded broker takes about half the session timeout for that) and 200 from then on;
``/healthz`` answers 200 throughout.

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
import urllib.error
import urllib.request
import uuid
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from cadenza.infra.broker.embedded import free_port
from cadenza.loadgen import HEALTH_PAGE, LoadPlan, Planned, Stream, produce_planned
from cadenza.settings import KafkaSettings
from tests.worker.kafka_io import Outgoing, produce, reading

pytestmark = [
    pytest.mark.slow("two worker processes join one group, run the example under load, then take a SIGTERM"),
    pytest.mark.kafka,
    pytest.mark.timeout(120),
]

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "clicks_per_user.py"
SOURCE, SINK, LATE = "clicks", "clicks-per-user", "clicks-per-user.late"
PARTITIONS = 4
RATE = 250.0
SPREAD_KEYS = 48  # keys per source partition for the warm-up and the final flush
SIGTERM_BOUND = 15.0
SESSION_TIMEOUT_MS = 30_000
HEARTBEAT_INTERVAL_MS = SESSION_TIMEOUT_MS // 6  # what cadenza's consumer factory derives from it
TAKEOVER_BOUND = (SESSION_TIMEOUT_MS - HEARTBEAT_INTERVAL_MS) / 1000  # before any session can expire
_TOPIC_PARTITION = re.compile(r"([A-Za-z0-9._-]+)\[(\d+)\]")


class WorkerProcess:
    """A ``cadenza worker`` subprocess whose assignment is followed through its JSON log lines."""

    def __init__(
        self, name: str, settings: KafkaSettings, group: str, session_timeout_ms: int = SESSION_TIMEOUT_MS
    ) -> None:
        self.name = name
        self.metrics_port = free_port()
        env = {
            **os.environ,
            "CADENZA_BOOTSTRAP_SERVERS": settings.bootstrap_servers,
            "CADENZA_SESSION_TIMEOUT_MS": str(session_timeout_ms),
            "CADENZA_LOG_LEVEL": "INFO",
            "CADENZA_LOG_FORMAT": "json",
            "CADENZA_GROUP": group,
        }
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "cadenza",
                "worker",
                str(EXAMPLE),
                "--group",
                group,
                "--metrics-port",
                str(self.metrics_port),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=ROOT,
        )
        self.lines: list[str] = []
        #: Whether an assignment callback ran (``assigned ...``, even ``assigned nothing``).
        self.joined = False
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
                    self.joined = True
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

    def probe(self, path: str) -> int:
        """The HTTP status of ``path`` on the worker's metrics port (0: nothing answers yet)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}{path}", timeout=2) as answer:
                return int(answer.status)
        except urllib.error.HTTPError as error:
            return error.code
        except OSError:
            return 0

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
    # Started together, so they form the group in one join round (each round takes the embedded
    # broker about half the 30 s session timeout).
    first = WorkerProcess("first", kafka_settings, group)
    second: WorkerProcess | None = None
    try:
        second = WorkerProcess("second", kafka_settings, group)
        both = second
        # "assigned" is logged when a partition's records start to run: the window's repartition
        # partitions only once their state is restored, after the source's.
        both.wait_for(
            "the group to share the partitions",
            lambda: (
                first.assignment
                and both.assignment
                and not first.assignment & both.assignment
                and len({topic for topic, _ in first.assignment | both.assignment}) >= 2
            ),
            timeout=60,
        )
        owned = first.assignment | second.assignment
        inputs = {topic for topic, _ in owned}
        assert SOURCE in inputs and len(inputs) >= 2, owned  # the source and the window's repartition topic
        spread(kafka_settings, f"warm{run}-", time.time() - 5)
        collect(LoadPlan((stream,), seed=1, duration=3.0), kafka_settings, sent)

        sigterm = time.monotonic()
        code, took = second.terminate()
        assert code == 0, f"SIGTERM exit code {code}; log:\n{second.log()}"
        assert took < SIGTERM_BOUND, f"took {took:.1f}s to stop after SIGTERM"
        # Only the worker's LeaveGroup lets the group rebalance this soon: its session cannot expire
        # before TAKEOVER_BOUND (its last heartbeat was at most one interval before the SIGTERM).
        first.wait_for(
            "the partitions of the stopped worker",
            lambda: first.assignment >= owned,
            timeout=max(0.0, sigterm + TAKEOVER_BOUND - time.monotonic()),
        )
        takeover = time.monotonic() - sigterm
        assert takeover < TAKEOVER_BOUND, f"partitions taken over {takeover:.1f}s after the SIGTERM"
        # The measurements, shown with -s.
        print(f"\nworker stopped {took:.2f}s after SIGTERM; partitions taken over after {takeover:.2f}s")

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


def test_readyz_answers_503_until_the_worker_joined_its_group(kafka_settings: KafkaSettings) -> None:
    """Probed from the moment the endpoint answers: 503 up to the group join, then 200."""
    worker = WorkerProcess("worker", kafka_settings, f"cadenza-ready-{uuid.uuid4().hex[:8]}", 12_000)
    try:
        worker.wait_for("its HTTP endpoint", lambda: worker.probe("/healthz") == 200, timeout=30)
        before: list[int] = []
        deadline = time.monotonic() + 30
        while True:
            joined = worker.joined  # read before the probe: a 200 then must not precede the join
            ready, live = worker.probe("/readyz"), worker.probe("/healthz")
            assert live == 200, f"/healthz answered {live}; log:\n{worker.log()}"
            if ready == 200 and not joined:
                # The join may have happened between the two reads; its log line is a moment away.
                worker.wait_for("the join that made it ready", lambda: worker.joined, timeout=2)
                joined = True
            if joined:
                break
            before.append(ready)
            assert time.monotonic() < deadline, f"no group join in 30 s; log:\n{worker.log()}"
            time.sleep(0.1)
        assert before and set(before) == {503}, f"/readyz before the group join: {before}"
        worker.wait_for("/readyz 200 after the join", lambda: worker.probe("/readyz") == 200, timeout=10)
        assert worker.probe("/healthz") == 200
        print(f"\n/readyz answered 503 to {len(before)} probes before the group join, then 200")
        code, _ = worker.terminate()
        assert code == 0, worker.log()
    finally:
        worker.kill()
