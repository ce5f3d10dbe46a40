"""Two workers in one group: partitions move between them (cooperative-sticky, incremental) and
window state moves with them through the changelog; the results are those of a single run."""

from __future__ import annotations

import json
import math
import time
import uuid
from collections import Counter

import pytest
from pydantic import BaseModel

from cadenza.pipelines import Pipeline, Tumbling
from cadenza.settings import KafkaSettings
from cadenza.testing.pytest_plugin import NewTopic
from cadenza.worker import Worker
from cadenza.worker.config import WorkerConfig
from tests.worker.kafka_io import Outgoing, Reader, produce, reading, running

pytestmark = pytest.mark.kafka

PARTITIONS = 4
OOO = 0.5


class Reading(BaseModel):
    sensor: str
    ts: float


def rows(start: int, stop: int) -> list[tuple[str, float, int]]:
    return [(f"s{i % 8}", i * 0.05, (i % 8) % PARTITIONS) for i in range(start, stop)]


def encode(batch: list[tuple[str, float, int]]) -> list[Outgoing]:
    return [(s.encode(), json.dumps({"sensor": s, "ts": ts}).encode(), p) for s, ts, p in batch]


def expected(all_rows: list[tuple[str, float, int]]) -> set[tuple[str, float, float, int]]:
    found: set[tuple[str, float, float, int]] = set()
    for partition in range(PARTITIONS):
        counts: Counter[tuple[str, float]] = Counter()
        watermark = -math.inf
        for sensor, ts, p in all_rows:
            if p != partition:
                continue
            if math.floor(ts) + 1.0 > watermark:
                counts[(sensor, math.floor(ts))] += 1
            watermark = max(watermark, ts - OOO)
        found.update((s, a, a + 1.0, n) for (s, a), n in counts.items() if a + 1.0 <= watermark)
    return found


def results(reader: Reader, topic: str) -> set[tuple[str, float, float, int]]:
    found = set()
    for record in reader.records[topic]:
        value = json.loads(record.value or b"")
        found.add((value["key"], value["window_start"], value["window_end"], value["value"]))
    return found


def test_partitions_and_their_window_state_move_between_workers(
    kafka_settings: KafkaSettings, new_topic: NewTopic
) -> None:
    settings = kafka_settings.model_copy(update={"session_timeout_ms": 3000})
    source, sink = new_topic(partitions=PARTITIONS), new_topic()
    pipeline = Pipeline(f"moving-{uuid.uuid4().hex[:6]}", tenant="iot", latency_target="1s")
    (
        pipeline.source(source, value=Reading, key=str, timestamp="ts", max_out_of_orderness=OOO)
        .window(Tumbling("1s"))
        .count()
        .sink(sink)
    )
    everything = [*rows(0, 1600), *[(f"s{k}", 10_000.0, k % PARTITIONS) for k in range(8)]]
    want = expected(everything)
    group = f"g-{uuid.uuid4().hex[:8]}"
    first = Worker([pipeline], settings, WorkerConfig(group=group))
    second = Worker([pipeline], settings, WorkerConfig(group=group))
    produce(settings, source, encode(rows(0, 600)))
    with running(first), reading(settings, [sink]) as reader:
        reader.wait_for(lambda got: len(got[sink]) >= 100, timeout=30, what="results from the first worker")
        assert len(first.assignment) == PARTITIONS
        with running(second):
            deadline = time.monotonic() + 30
            while not (first.assignment and second.assignment) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert first.assignment and second.assignment, "the group should share the partitions"
            assert first.assignment.isdisjoint(second.assignment)
            produce(settings, source, encode(rows(600, 1200)))
            reader.wait_for(lambda got: len(got[sink]) >= 300, timeout=30, what="results from both workers")
        # The second worker left: its partitions (and their state) come back to the first.
        deadline = time.monotonic() + 30
        while len(first.assignment) < PARTITIONS and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(first.assignment) == PARTITIONS
        produce(settings, source, encode(everything[1200:]))
        reader.wait_for(lambda got: results(reader, sink) >= want, timeout=30, what="every window result")
        reader.settle(0.5)
    assert results(reader, sink) == want
    assert second.counters.restored_keys > 0  # it took over open windows
    assert first.counters.restored_keys > 0  # and handed them back
