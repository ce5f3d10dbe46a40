"""A newly assigned partition waits for its own state only: while a large window state is read back
from its changelog, the worker's other partitions run, none of the restoring partition's records
runs before its state is back, and the results afterwards are those of one uninterrupted run."""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter

import pytest
from confluent_kafka import OFFSET_BEGINNING, TopicPartition
from pydantic import BaseModel

from cadenza.infra.kafka.clients import make_consumer
from cadenza.pipelines import Pipeline, Tumbling
from cadenza.settings import KafkaSettings
from cadenza.testing.pytest_plugin import NewTopic
from cadenza.worker import Worker
from cadenza.worker.config import WorkerConfig
from tests.worker.kafka_io import Reader, produce, reading, running

pytestmark = [
    pytest.mark.kafka,
    pytest.mark.slow("restores a large window state from its changelog while the other partitions run"),
]

KEYS = 20_000
COPIES = 20
FLUSH_TS = 1_000_000.0


class Reading(BaseModel):
    key: str
    ts: float


def encoded(rows: list[tuple[str, float]]) -> list[tuple[bytes, bytes, int]]:
    return [(key.encode(), json.dumps({"key": key, "ts": ts}).encode(), 0) for key, ts in rows]


def counts(reader: Reader, topic: str) -> dict[str, set[int]]:
    found: dict[str, set[int]] = {}
    for record in reader.records[topic]:
        value = json.loads(record.value or b"")
        if value["window_start"] == 0.0:
            found.setdefault(value["key"], set()).add(value["value"])
    return found


def count_records(settings: KafkaSettings, topic: str, quiet: float = 2.0) -> int:
    """Records in partition 0 of ``topic``, read from its start until ``quiet`` seconds bring none."""
    consumer, _ = make_consumer(settings, f"count-{uuid.uuid4().hex[:8]}")
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        count, last = 0, time.monotonic()
        while time.monotonic() - last < quiet:
            messages = [m for m in consumer.consume(1000, 0.2) if m.error() is None]
            if messages:
                count, last = count + len(messages), time.monotonic()
        return count
    finally:
        consumer.close()


@pytest.mark.parametrize("assignor", ["cooperative-sticky", "range"])  # incremental, and eager
def test_a_restoring_partition_waits_alone_and_its_results_are_exact(
    kafka_settings: KafkaSettings, new_topic: NewTopic, assignor: str
) -> None:
    overrides = {"partition.assignment.strategy": assignor}
    counted, copied, counts_out, copies_out = new_topic(), new_topic(), new_topic(), new_topic()
    name = f"restore-{uuid.uuid4().hex[:6]}"
    count = Pipeline(name + "-count", tenant="a", latency_target="1s")
    (
        count.source(counted, value=Reading, key=str, timestamp="ts", max_out_of_orderness=10_000.0)
        .window(Tumbling("1s"))
        .count()
        .sink(counts_out)
    )
    copy = Pipeline(name + "-copy", tenant="b", latency_target="1s")
    copy.source(copied, value=Reading).map(lambda r: {"key": r.key}).sink(copies_out)
    group = f"g-{uuid.uuid4().hex[:8]}"
    # One record per key, all in the window [0, 1) that the huge out-of-orderness keeps open: the first
    # worker leaves KEYS keys of open state in the changelog.
    first_rows = [(f"k{i}", (i % 1000) / 1000.0) for i in range(KEYS)]
    produce(kafka_settings, counted, encoded(first_rows))
    first = Worker([count, copy], kafka_settings, WorkerConfig(group=group, consumer_overrides=overrides))
    with running(first):
        deadline = time.monotonic() + 60
        # Run, not only fetched: records still queued at the stop are handed back uncommitted, and the
        # next worker would read them again instead of restoring them.
        while first.counters.units < KEYS and time.monotonic() < deadline:
            time.sleep(0.1)
        assert first.counters.units >= KEYS, "the first worker did not run the records"
    # What the restore must read back: every record of the changelog, counted by reading until nothing
    # more comes (not to the end the broker reports, which the embedded broker under-reports).
    changelog_records = count_records(kafka_settings, f"{count.name}.2-count.changelog")
    assert changelog_records > KEYS / 2, "the first worker changelogged little of its state"
    # Meanwhile: more of the window, input for the stateless pipeline, and a record that closes the window.
    second_rows = [(f"k{i}", 0.5) for i in range(0, KEYS, 7)]
    produce(kafka_settings, counted, encoded([*second_rows, ("~flush", FLUSH_TS)]))
    produce(kafka_settings, copied, encoded([(f"c{i}", 0.0) for i in range(COPIES)]))

    # A restore slice of a millisecond: reading KEYS changelog records takes many steps.
    second = Worker(
        [count, copy],
        kafka_settings,
        WorkerConfig(group=group, restore_slice=0.001, consumer_overrides=overrides),
    )
    held_at: list[tuple[bool, int, int]] = []  # per step: counted held, copy records run, count records run
    second.start()
    try:
        copy_runs = next(s for s in second.engine.schedules if s.pipeline == copy.name).metrics
        count_runs = next(s for s in second.engine.schedules if s.pipeline == count.name).metrics
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            second.step()
            held = (counted, 0) in second.membership.restorer.holding
            held_at.append((held, copy_runs.processed, count_runs.processed))
            if second.counters.window_results >= KEYS:  # the closing record ran
                break
    finally:
        second.stop()
        second.close()
    while_held = [step for step in held_at if step[0]]
    assert while_held, "the counted partition was never held for its restore"
    assert all(count_ran == 0 for _, _, count_ran in while_held), "a record ran before its state was back"
    assert any(copy_ran == COPIES for _, copy_ran, _ in while_held), (
        "the stateless partition should have run while the other one restored"
    )
    # All of it, though the first worker's last records may come again (at-least-once; the counts
    # below are exact either way).
    assert second.counters.restored_records == changelog_records

    want = Counter(key for key, _ in [*first_rows, *second_rows])
    with reading(kafka_settings, [counts_out, copies_out]) as reader:
        reader.wait_for(lambda got: len(counts(reader, counts_out)) >= KEYS, timeout=60, what="every count")
        reader.settle(0.5)
        assert counts(reader, counts_out) == {key: {n} for key, n in want.items()}
        assert len(reader.records[copies_out]) >= COPIES
