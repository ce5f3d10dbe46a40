"""A windowed stream-stream join through the real broker equals a brute-force pairing of the same
records, late records included, across a worker restart that restores the join state from its
changelog.

Which records are late must not depend on how the consumer interleaves the two input topics, so the
data is built to make it certain: a record counts as on time only if even the highest watermark its
own side could have produced by then (its side's newest time before it, minus the disorder) leaves
its join window open; a record counts as late only if the watermark the worker had surely reached
(both sides' phase-one markers processed) already closed its window. The test checks every record is
one or the other, then compares the worker's output to every pair of on-time records with equal keys
and times at most ``within`` apart.
"""

from __future__ import annotations

import json
import math
import random
import uuid
from collections import Counter

import pytest
from pydantic import BaseModel

from cadenza.pipelines import Pipeline
from cadenza.settings import KafkaSettings
from cadenza.testing.pytest_plugin import NewTopic
from cadenza.worker import Worker
from cadenza.worker.config import WorkerConfig
from tests.worker.kafka_io import Reader, produce, running

pytestmark = pytest.mark.kafka

# Binary fractions, so that float arithmetic is exact and "at most within apart" means one thing.
WITHIN = 0.375
LATENESS = 0.25
DISORDER = 0.5
LEFT, RIGHT = 0, 1


class Ev(BaseModel):
    id: int
    k: str
    ts: float


Row = tuple[int, str, float, int]  # side, key, event time, id


def phase(rng: random.Random, start: float, count: int, first_id: int, marker: str) -> list[Row]:
    """Both sides' records around a rising clock, then one marker per side at the phase's end time."""
    rows: list[Row] = []
    for i in range(count):
        t = start + i * 0.125 + rng.choice([-0.375, -0.25, -0.125, 0.0, 0.125, 0.25, 0.375])
        rows.append((rng.randrange(2), f"k{rng.randrange(4)}", max(0.0, t), first_id + i))
    end = max(t for _, _, t, _ in rows)
    rows += [(LEFT, marker, end, first_id + count), (RIGHT, marker, end, first_id + count + 1)]
    return rows


def brute_force(rows: list[Row], late_ids: set[int]) -> Counter[tuple[int, int]]:
    kept = [r for r in rows if r[3] not in late_ids]
    return Counter(
        (left[3], right[3])
        for left in kept
        for right in kept
        if left[0] == LEFT and right[0] == RIGHT and left[1] == right[1] and abs(left[2] - right[2]) <= WITHIN
    )


def check_lateness_is_certain(rows: list[Row], late_ids: set[int], surely_reached: float) -> None:
    newest = {LEFT: -math.inf, RIGHT: -math.inf}
    for side, _, t, ident in rows:
        closes = t + WITHIN + LATENESS
        if ident in late_ids:
            assert closes <= surely_reached, f"record {ident} might not be late"
        else:
            assert closes > newest[side] - DISORDER, f"record {ident} might be late"
        newest[side] = max(newest[side], t)


def encode(row: Row) -> bytes:
    return json.dumps({"id": row[3], "k": row[1], "ts": row[2]}).encode()


def test_join_equals_a_brute_force_pairing_with_late_records_and_a_restart(
    kafka_settings: KafkaSettings, new_topic: NewTopic
) -> None:
    left_topic, right_topic, out = new_topic(partitions=1), new_topic(partitions=1), new_topic()
    name = f"join-{uuid.uuid4().hex[:6]}"
    pipeline = Pipeline(name, tenant="ads", latency_target="250ms")
    left = pipeline.source(left_topic, value=Ev, timestamp="ts", max_out_of_orderness=DISORDER).key_by(
        lambda e: e.k
    )
    right = pipeline.source(right_topic, value=Ev, timestamp="ts", max_out_of_orderness=DISORDER).key_by(
        lambda e: e.k
    )
    (
        left.join(right, within=WITHIN, allowed_lateness=LATENESS)
        .map(lambda pair: {"l": pair[0].id, "r": pair[1].id})
        .sink(out)
    )
    rng = random.Random(23)
    first = phase(rng, 0.0, 160, 0, "~m1")
    end_one = first[-1][2]
    late = [
        (rng.randrange(2), f"k{rng.randrange(4)}", rng.randrange(int(end_one - 4.0) * 8) / 8, 500 + i)
        for i in range(8)
    ]
    second = phase(rng, end_one - 0.375, 160, 1000, "~m2")
    rows = [*first, *late, *second]
    late_ids = {row[3] for row in late}
    check_lateness_is_certain(rows, late_ids, surely_reached=end_one - DISORDER)
    want = brute_force(rows, late_ids)
    first_ids = {row[3] for row in first}
    across = [pair for pair in want if (pair[0] in first_ids) != (pair[1] in first_ids)]
    assert across, "some pairs need the restored state: one record from each worker's share"

    def send(part: list[Row]) -> None:
        for side, topic in ((LEFT, left_topic), (RIGHT, right_topic)):
            produce(kafka_settings, topic, [(None, encode(row), 0) for row in part if row[0] == side])

    group = f"g-{name}"
    late_topic = f"{name}.late"

    def worker() -> Worker:
        return Worker([pipeline], kafka_settings, WorkerConfig(group=group, watermark_idle_timeout=0))

    marker_one = {"l": first[-2][3], "r": first[-1][3]}
    reader: Reader | None = None
    try:
        with running(worker()) as one:
            reader = Reader(kafka_settings, [out, late_topic])  # the worker created the topics
            send(first)
            reader.wait_for(
                lambda got: any(json.loads(r.value or b"") == marker_one for r in got[out]),
                timeout=30,
                what="the phase-one marker pair",
            )
        assert one.counters.late == 0
        with running(worker()) as two:
            assert two.counters.restored_keys > 0
            send(late + second)
            reader.wait_for(
                lambda got: len(got[out]) >= sum(want.values()) and len(got[late_topic]) >= len(late),
                timeout=30,
                what="every pair and late record",
            )
            reader.settle(1.0)
    finally:
        if reader is not None:
            reader.close()
    got = Counter((v["l"], v["r"]) for v in (json.loads(r.value or b"") for r in reader.records[out]))
    assert got == want
    assert sorted(json.loads(r.value or b"")["id"] for r in reader.records[late_topic]) == sorted(late_ids)
    assert two.counters.late == len(late)
