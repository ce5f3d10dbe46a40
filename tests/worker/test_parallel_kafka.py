"""Parallel steps through the real broker: a worker's process and thread lessees give exactly the
outputs of plain steps, in offset order per partition, and it commits every input once done."""

from __future__ import annotations

import json
import time
import uuid

import pytest

from cadenza.pipelines import Pipeline
from cadenza.settings import KafkaSettings
from cadenza.testing.pytest_plugin import NewTopic
from cadenza.worker import Worker
from cadenza.worker.config import WorkerConfig
from tests.worker.kafka_io import committed, produce, reading, running

pytestmark = pytest.mark.kafka

RECORDS = 400


def squared(value: dict[str, int]) -> dict[str, int]:
    time.sleep(0.0005)  # some work, so calls overlap and finish out of order across lessees
    return {"i": value["i"], "sq": value["i"] ** 2}


def odd_squares(value: dict[str, int]) -> bool:
    time.sleep(0.005)  # the last calls come back while the loop has nothing else to do
    return value["sq"] % 2 == 1


def test_process_and_thread_lessees_give_the_plain_outputs_in_offset_order_and_commit_all(
    kafka_settings: KafkaSettings, new_topic: NewTopic
) -> None:
    source, sink = new_topic(partitions=3), new_topic(partitions=3)
    pipeline = Pipeline(f"par-{uuid.uuid4().hex[:6]}", tenant="t", latency_target="2s")
    (
        pipeline.source(source, key=str)
        .map(squared, parallel=2, executor="process")
        .filter(odd_squares, parallel="auto", executor="thread")
        .sink(sink)
    )
    records = [(f"k{i % 5}".encode(), json.dumps({"i": i}).encode(), None) for i in range(RECORDS)]
    group = f"g-{uuid.uuid4().hex[:8]}"
    worker = Worker([pipeline], kafka_settings, WorkerConfig(group=group, cores=3))
    with reading(kafka_settings, [sink]) as reader, running(worker):
        produce(kafka_settings, source, records)
        expected = sum(1 for i in range(RECORDS) if i % 2 == 1)
        reader.wait_for(lambda got: len(got[sink]) >= expected, timeout=60, what="all outputs")
        reader.settle(0.5)
        deadline = time.monotonic() + 30
        while sum(max(0, o) for o in committed(kafka_settings, group, source, 3)) < RECORDS:
            assert time.monotonic() < deadline, "the worker did not commit every input it finished"
            time.sleep(0.2)
        engine = worker.engine
        assert engine.lessees is not None
        handed = {step.node_id: step.stats.handoff_calls for step in engine.lessees.steps}
        exposition = worker.exporter.render().decode()
    got = [json.loads(r.value or b"") for r in reader.records[sink]]
    assert sorted(v["i"] for v in got) == [i for i in range(RECORDS) if i % 2 == 1]  # once each
    # Per key (one partition each), outputs in input order: the release is in offset order.
    by_key: dict[bytes | None, list[int]] = {}
    for record in reader.records[sink]:
        by_key.setdefault(record.key, []).append(json.loads(record.value or b"")["i"])
    for values in by_key.values():
        assert values == sorted(values)
    assert all(count > 0 for count in handed.values()), handed  # both steps' calls went to lessees
    for step, count in handed.items():  # and the metrics say so, per step
        assert f'operator="{step}"' in exposition
        assert any(
            line.startswith("cadenza_lessee_handed_calls_total{")
            and f'operator="{step}"' in line
            and float(line.rsplit(" ", 1)[1]) == count
            for line in exposition.splitlines()
        ), exposition
    assert "cadenza_lessees{" in exposition
