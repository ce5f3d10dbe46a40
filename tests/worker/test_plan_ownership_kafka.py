"""Plan ownership through the real broker: partitions move between two running workers warm and one
at a time, the new owner takes each from its warm copy (no restore after the hand-over), and the
window results are those of one uninterrupted run, whatever moved when."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable

import pytest
from pydantic import BaseModel

from cadenza.errors import ConfigError
from cadenza.pipelines import Pipeline, Tumbling
from cadenza.scaling.handover import MigrationTimeoutError, PlanMover
from cadenza.scaling.migration import balanced
from cadenza.scaling.ownership import Claim, OwnershipLog
from cadenza.settings import KafkaSettings
from cadenza.testing.pytest_plugin import NewTopic
from cadenza.worker import Worker
from cadenza.worker.config import WorkerConfig
from tests.worker.kafka_io import Reader, produce, reading, running

pytestmark = pytest.mark.kafka

PARTITIONS = 4
FLUSH_TS = 1_000_000.0


class Reading(BaseModel):
    key: str
    ts: float


def encoded(rows: list[tuple[str, float]]) -> list[tuple[bytes, bytes, int]]:
    """Keyed rows, spread over the partitions by key (so every partition has state)."""
    return [
        (key.encode(), json.dumps({"key": key, "ts": ts}).encode(), int(key[1:]) % PARTITIONS)
        for key, ts in rows
    ]


def counts(reader: Reader, topic: str) -> dict[str, list[int]]:
    found: dict[str, list[int]] = {}
    for record in reader.records[topic]:
        value = json.loads(record.value or b"")
        if value["window_start"] == 0.0:
            found.setdefault(value["key"], []).append(value["value"])
    return found


def feed_during(
    settings: KafkaSettings, topic: str, rows: list[tuple[str, float]], chunk: int
) -> Callable[[float], bool]:
    """Produce ``rows`` in chunks 50 ms apart from a thread (input that keeps arriving while
    partitions move); returns a wait for the thread, true once every chunk was produced."""
    done = threading.Event()

    def feed() -> None:
        for start in range(0, len(rows), chunk):
            produce(settings, topic, encoded(rows[start : start + chunk]))
            time.sleep(0.05)
        done.set()

    thread = threading.Thread(target=feed, daemon=True)
    thread.start()

    def finished(timeout: float) -> bool:
        thread.join(timeout)
        return done.is_set()

    return finished


def wait(condition: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.05)


def test_partitions_move_warm_one_at_a_time_and_the_results_are_exact(
    kafka_settings: KafkaSettings, new_topic: NewTopic
) -> None:
    source, sink = new_topic(PARTITIONS), new_topic()
    name = f"plan-{uuid.uuid4().hex[:6]}"
    pipeline = Pipeline(name, tenant="a", latency_target="1s")
    (
        pipeline.source(source, value=Reading, key=str, timestamp="ts", max_out_of_orderness=10_000.0)
        .window(Tumbling("1s"))
        .count()
        .sink(sink)
    )
    group = f"g-{uuid.uuid4().hex[:8]}"
    partitions = [(source, p) for p in range(PARTITIONS)]
    mover = PlanMover(kafka_settings, group, step_timeout=60.0)
    first = Worker([pipeline], kafka_settings, WorkerConfig(group=group, ownership="plan", worker_id="w1"))
    second = Worker([pipeline], kafka_settings, WorkerConfig(group=group, ownership="plan", worker_id="w2"))
    # Every key stays in the open window [0, 1): each partition holds state when it moves.
    before = [(f"k{i}", (i % 1000) / 1000.0) for i in range(2000)]
    during = [(f"k{i}", 0.5) for i in range(0, 2000, 3)]

    try:
        mover.place(dict.fromkeys(partitions, "w1"))
        produce(kafka_settings, source, encoded(before))
        with running(first, join_timeout=None), running(second, join_timeout=None):
            wait(lambda: first.counters.consumed >= len(before), 60, "w1 to take the first records in")
            assert first.assignment == set(partitions)
            fed = feed_during(kafka_settings, source, during, 50)  # input keeps arriving meanwhile
            steps = mover.migrate(balanced(mover.owners(), ["w1", "w2"]), "fluid")
            assert fed(60), "the input feeder did not finish"
            assert [len(moves) for moves, _ in steps] == [1, 1], "fluid: one partition per step"
            wait(lambda: len(second.assignment) == 2, 30, "w2 to run its two partitions")
            assert first.assignment | second.assignment == set(partitions)
            assert not first.assignment & second.assignment
            # Taken from the warm copies: the hand-over restored nothing from the start of a changelog.
            assert second.counters.warm_installs == 2
            assert second.counters.restored_records == 0
            assert second.counters.restored_keys > 0
            assert not second.membership.restorer.restoring
            produce(kafka_settings, source, encoded([(f"k{p}", FLUSH_TS) for p in range(PARTITIONS)]))
            want = Counter(key for key, _ in [*before, *during])
            with reading(kafka_settings, [sink]) as reader:
                reader.wait_for(lambda _: len(counts(reader, sink)) >= len(want), 60, "every count")
                reader.settle(0.5)
                assert counts(reader, sink) == {key: [n] for key, n in want.items()}
    finally:
        mover.close()


def test_plan_ownership_refuses_joins(kafka_settings: KafkaSettings) -> None:
    left = Pipeline("left-only", tenant="a", latency_target="1s")
    right_stream = left.source("r", value=Reading, key=str, timestamp="ts")
    left.source("l", value=Reading, key=str, timestamp="ts").join(right_stream, "1s").sink("out")
    with pytest.raises(ConfigError, match="does not run joins"):
        Worker([left], kafka_settings, WorkerConfig(ownership="plan"))


def test_a_move_that_does_not_finish_is_cancelled_back_to_its_old_owner(
    kafka_settings: KafkaSettings,
) -> None:
    group = f"g-{uuid.uuid4().hex[:8]}"
    mover = PlanMover(kafka_settings, group, step_timeout=1.0)
    try:
        mover.place({("t", 0): "w1", ("t", 1): "w1"})
        # Nobody runs "ghost": its warm copy never says ready, so the first step times out.
        with pytest.raises(MigrationTimeoutError, match=r"\('t', 1\)"):
            mover.migrate({("t", 0): "w1", ("t", 1): "ghost"}, "fluid")
        assert mover.owners() == {("t", 0): "w1", ("t", 1): "w1"}
        # The cancellation is a new epoch: a late record of the cancelled move is ignored.
        stale = OwnershipLog(kafka_settings, group)
        try:
            stale.write({("t", 1): Claim("w1", 0, "ready", "ghost")})
            reader = OwnershipLog(kafka_settings, group)
            try:
                reader.poll(0.5)
                assert reader.read_to_end() == {("t", 0): Claim("w1", 0), ("t", 1): Claim("w1", 1)}
            finally:
                reader.close()
        finally:
            stale.close()
    finally:
        mover.close()
