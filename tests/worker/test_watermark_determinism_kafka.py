"""Window results and late records do not depend on fetch timing: a property test through the broker.

One seeded input (three source partitions, each in order with disorder inside the declared
out-of-orderness, several keys) is delivered to worker processes in five ways: as a backlog; with
one partition complete before the others start; with the partitions starting seconds apart (inside
the idle timeout); with the worker SIGKILLed mid-way and restarted; and with a second worker
joining mid-way. Four pipelines read it, each ``key_by`` -> repartition topic -> window (tumbling,
hopping, sliding, session) -> sum. Every time, the distinct window results must equal a brute force
over the input (``tests/operators/window_oracle.py``) and the late and dead-letter topics must stay
empty. Duplicated results (at-least-once output after a kill) are allowed if identical.

A last record per source partition, far ahead in event time and under one key, makes every window
of the input due. Its key lands in one repartition partition only, so the other partitions close
their windows only through the progress records upstream sends to every partition: the test fails
if those do not arrive, and it failed before the fix (windows' watermarks learnt their inputs from
the records, so a fast partition made the others' records late).
"""

from __future__ import annotations

import json
import os
import random
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from cadenza.settings import KafkaSettings
from cadenza.testing.pytest_plugin import NewTopic
from tests.operators.window_oracle import Expected, expected_windows
from tests.worker import test_crash_restore_kafka as crash
from tests.worker.kafka_io import Outgoing, Reader, Record, produce

pytestmark = pytest.mark.kafka

PARTITIONS = 3
OOO = 5
SIZE, HOP, GAP = 10, 4, 3
KINDS = ("tumbling", "hopping", "sliding", "session")
FLUSH_KEY = "~flush"

PIPELINE_MODULE = f'''
"""The pipelines of the watermark determinism test; names come from the environment."""

import os

from pydantic import BaseModel

from cadenza.pipelines import Hopping, Pipeline, Session, Sliding, Tumbling


class Event(BaseModel):
    key: str
    ts: float
    value: int


def key_of(event: Event) -> str:
    return event.key


def value_of(event: Event) -> float:
    return event.value


PREFIX = os.environ["WM_PREFIX"]
SPECS = {{
    "tumbling": Tumbling({SIZE}),
    "hopping": Hopping({SIZE}, {HOP}),
    "sliding": Sliding({SIZE}),
    "session": Session({GAP}),
}}
for kind, spec in SPECS.items():
    pipeline = Pipeline(
        f"{{PREFIX}}-{{kind}}",
        tenant="wm",
        latency_target="1s",
        late_topic=os.environ["WM_LATE"],
        dead_letter_topic=os.environ["WM_DLQ"],
    )
    (
        pipeline.source(os.environ["WM_SOURCE"], value=Event, timestamp="ts", max_out_of_orderness={OOO})
        .key_by(key_of)
        .window(spec)
        .sum(value_of)
        .sink(os.environ["WM_OUT_" + kind.upper()])
    )
    globals()[kind] = pipeline
'''

Row = tuple[str, int, int]  # key, event time, value


def make_input(seed: int, per_partition: int) -> list[list[Row]]:
    """Per source partition, records in offset order, each less than OOO behind the largest before."""
    rng = random.Random(seed)
    partitions: list[list[Row]] = []
    for _ in range(PARTITIONS):
        largest = rng.randint(0, 30)
        rows: list[Row] = []
        for _ in range(per_partition):
            t = rng.randint(largest - OOO + 1, largest + 3)
            largest = max(largest, t)
            rows.append((f"k{rng.randint(0, 5)}", t, rng.randint(1, 9)))
        partitions.append(rows)
    return partitions


def encode(rows: list[Row], partition: int) -> list[Outgoing]:
    return [
        (None, json.dumps({"key": key, "ts": t, "value": value}).encode(), partition)
        for key, t, value in rows
    ]


def results(records: list[Record]) -> list[Expected]:
    found: list[Expected] = []
    for record in records:
        value = json.loads(record.value or b"")
        if value["key"] != FLUSH_KEY:
            found.append((value["key"], value["window_start"], value["window_end"], value["value"]))
    return found


class WorkerRun:
    """Worker processes of one pipeline module against fresh topics, and a reader of what they write."""

    def __init__(
        self,
        settings: KafkaSettings,
        new_topic: NewTopic,
        tmp: Path,
        name: str,
        *,
        module: str,
        env: dict[str, str],
        outputs: list[str],
    ) -> None:
        self.settings = settings
        self.late, self.dlq = new_topic(), new_topic()
        self.prefix = f"{name}-{uuid.uuid4().hex[:6]}"
        self.module = tmp / f"{name.replace('-', '_')}.py"
        self.module.write_text(module)
        self.group = f"g-{self.prefix}"
        self.log = tmp / f"{name}.log"
        self.env = {
            **os.environ,
            "CADENZA_BOOTSTRAP_SERVERS": settings.bootstrap_servers,
            "CADENZA_SESSION_TIMEOUT_MS": "3000",
            "WM_PREFIX": self.prefix,
            "WM_LATE": self.late,
            "WM_DLQ": self.dlq,
            **env,
        }
        self.reader = Reader(settings, [*outputs, self.late, self.dlq])
        self.workers: list[crash.WorkerProcess] = []
        self.killed: list[crash.WorkerProcess] = []

    def start_worker(self) -> crash.WorkerProcess:
        worker = crash.WorkerProcess(self.module, self.group, self.env, self.log)
        self.workers.append(worker)
        return worker

    def kill(self, worker: crash.WorkerProcess) -> None:
        worker.kill()
        self.killed.append(worker)

    def wait(self, done: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            for worker in self.workers:
                if worker not in self.killed:
                    worker.alive()
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}:\n{self.tail()}")
            self.reader.poll(0.2)

    def tail(self, size: int = 4000) -> str:
        return self.log.read_text()[-size:] if self.log.exists() else ""

    def deliver(self, name: str, play: Callable[[], None]) -> None:
        """Run delivery ``name`` (``play``), let the last results arrive, stop every worker; then no
        record may have gone late or dead."""
        try:
            play()
            self.reader.settle(1.5)
        finally:
            self.close()
        late = self.reader.records[self.late]
        assert not late, f"{name}: {len(late)} on-time records went late, e.g. {late[0]}\n{self.tail()}"
        assert not self.reader.records[self.dlq], f"{name}: dead letters {self.reader.records[self.dlq][:3]}"

    def close(self) -> None:
        for worker in self.workers:
            if worker.process.poll() is None:
                worker.terminate()
        self.reader.close()


class Run(WorkerRun):
    """One delivery of the input: a source topic and an output topic per window kind."""

    def __init__(self, settings: KafkaSettings, new_topic: NewTopic, tmp: Path, name: str) -> None:
        self.source = new_topic(partitions=PARTITIONS)
        self.outs = {kind: new_topic() for kind in KINDS}
        env = {
            "WM_SOURCE": self.source,
            **{f"WM_OUT_{kind.upper()}": topic for kind, topic in self.outs.items()},
        }
        outputs = list(self.outs.values())
        super().__init__(
            settings, new_topic, tmp, f"wm-{name}", module=PIPELINE_MODULE, env=env, outputs=outputs
        )

    def send(self, partition: int, rows: list[Row]) -> None:
        produce(self.settings, self.source, encode(rows, partition))

    def found(self) -> dict[str, set[Expected]]:
        return {kind: set(results(self.reader.records[topic])) for kind, topic in self.outs.items()}

    def wait_results(self, expected: dict[str, set[Expected]], timeout: float = 120.0) -> None:
        def complete() -> bool:
            found = self.found()
            return all(found[kind] >= expected[kind] for kind in KINDS) or bool(
                self.reader.records[self.late]
            )

        self.wait(complete, timeout, "every window result")


def backlog(run: Run, parts: list[list[Row]], expected: dict[str, set[Expected]]) -> None:
    for partition, rows in enumerate(parts):
        run.send(partition, rows)
    run.start_worker()
    run.wait_results(expected)


def one_far_ahead(run: Run, parts: list[list[Row]], expected: dict[str, set[Expected]]) -> None:
    run.send(0, parts[0])
    run.start_worker()
    run.wait(lambda: "assigned" in run.tail(), 60, "the worker's assignment")
    time.sleep(3.0)  # partition 0 is done long before the others deliver anything
    for partition in range(1, PARTITIONS):
        run.send(partition, parts[partition])
    run.wait_results(expected)


def staggered(run: Run, parts: list[list[Row]], expected: dict[str, set[Expected]]) -> None:
    run.start_worker()
    run.wait(lambda: "assigned" in run.tail(), 60, "the worker's assignment")
    half = [len(rows) // 2 for rows in parts]
    for partition, rows in enumerate(parts):  # each partition starts two seconds after the previous
        run.send(partition, rows[: half[partition]])
        time.sleep(2.0)
    for partition, rows in enumerate(parts):
        run.send(partition, rows[half[partition] :])
    run.wait_results(expected)


def killed(run: Run, parts: list[list[Row]], expected: dict[str, set[Expected]]) -> None:
    half = [len(rows) // 2 for rows in parts]
    for partition, rows in enumerate(parts):
        run.send(partition, rows[: half[partition]])
    first = run.start_worker()
    run.wait(lambda: any(run.found().values()), 60, "the first results")
    # Its changelog is written with its commits (every 0.2 s): give it a few, so that the restart has
    # state to restore (a kill before the first one leaves an empty changelog and nothing to check).
    time.sleep(1.0)
    run.kill(first)
    for partition, rows in enumerate(parts):
        run.send(partition, rows[half[partition] :])
    run.start_worker()
    run.wait_results(expected)
    # The whole log: the restart's later lines (a notice per unclean partition, say) may fill a tail.
    log = run.log.read_text()
    assert "restored" in log, "the restarted worker should have restored state from the changelog"


def joined(run: Run, parts: list[list[Row]], expected: dict[str, set[Expected]]) -> None:
    thirds = [len(rows) // 3 for rows in parts]
    for partition, rows in enumerate(parts):
        run.send(partition, rows[: thirds[partition]])
    run.start_worker()
    run.wait(lambda: any(run.found().values()), 60, "the first results")
    run.start_worker()
    for partition, rows in enumerate(parts):
        run.send(partition, rows[thirds[partition] : 2 * thirds[partition]])
    time.sleep(3.0)  # the second worker joins the group meanwhile
    for partition, rows in enumerate(parts):
        run.send(partition, rows[2 * thirds[partition] :])
    run.wait_results(expected)


SCENARIOS: dict[str, Callable[[Run, list[list[Row]], dict[str, set[Expected]]], None]] = {
    "backlog": backlog,
    "one-far-ahead": one_far_ahead,
    "staggered": staggered,
    "killed": killed,
    "joined": joined,
}


def broker_scenarios(max_examples: int) -> settings:
    """Hypothesis settings for examples that each run whole scenarios through the broker."""
    return settings(
        max_examples=max_examples,
        deadline=None,
        phases=[Phase.generate],  # shrinking would rerun whole broker scenarios
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


# One test per delivery, so that the deliveries run side by side under xdist; each draws its own
# inputs, so the five together see ten seeds where one test running all five saw two.
@pytest.mark.slow(
    "two inputs, each through worker processes that join a group; the deliveries sleep to "
    "stagger, kill and restart, or add a worker"
)
@pytest.mark.parametrize("name", list(SCENARIOS))
@broker_scenarios(2)
@given(seed=st.integers(0, 2**31), per_partition=st.integers(60, 160))
def test_window_results_are_the_same_whatever_the_fetch_timing(
    *,
    kafka_settings: KafkaSettings,
    new_topic: NewTopic,
    tmp_path_factory: pytest.TempPathFactory,
    name: str,
    seed: int,
    per_partition: int,
) -> None:
    data = make_input(seed, per_partition)
    flush_at = max(t for rows in data for _, t, _ in rows) + 1000
    parts = [[*rows, (FLUSH_KEY, flush_at, 1)] for rows in data]
    every = [row for rows in data for row in rows]
    expected = {
        kind: expected_windows(kind, every, size=SIZE, hop=HOP, gap=GAP, watermark=float(flush_at - OOO))
        for kind in KINDS
    }
    run = Run(kafka_settings, new_topic, tmp_path_factory.mktemp("wm"), name)
    run.deliver(name, lambda: SCENARIOS[name](run, parts, expected))
    found = run.found()
    for kind in KINDS:
        wrong = found[kind] - expected[kind]
        missing = expected[kind] - found[kind]
        assert not wrong and not missing, (
            f"{name}, {kind} (seed {seed}): wrong {sorted(wrong)[:5]}, missing {sorted(missing)[:5]}"
        )
