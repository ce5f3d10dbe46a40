"""A stall of a started worker's loop, through a real broker: a user function that sleeps on one record
is counted under ``run`` in ``cadenza_worker_stalls_total``, and the warning names its pipeline and
partition."""

from __future__ import annotations

import json
import logging
import time
import uuid

import pytest
from prometheus_client import generate_latest
from pydantic import BaseModel

from cadenza.infra.metrics.prometheus import PrometheusExporter
from cadenza.pipelines import Pipeline
from cadenza.settings import KafkaSettings
from cadenza.testing.pytest_plugin import NewTopic
from cadenza.worker import Worker
from cadenza.worker.config import WorkerConfig
from cadenza.worker.parts import WorkerParts
from tests.worker.kafka_io import produce, reading, running

pytestmark = pytest.mark.kafka

SLEEP_S = 0.4


class Item(BaseModel):
    name: str


def slow_on_marked(item: Item) -> Item:
    if item.name == "slow":
        time.sleep(SLEEP_S)
    return item


def item(name: str) -> bytes:
    return json.dumps({"name": name}).encode()


def sample(exporter: PrometheusExporter, name: str, phase: str) -> float:
    prefix = f'{name}{{phase="{phase}"}} '
    for line in generate_latest(exporter.registry).decode().splitlines():
        if line.startswith(prefix):
            return float(line[len(prefix) :])
    raise AssertionError(f"no {prefix.strip()} sample in the worker's metrics")


def test_a_slow_user_function_is_a_stall_under_run_naming_its_step(
    kafka_settings: KafkaSettings, new_topic: NewTopic, caplog: pytest.LogCaptureFixture
) -> None:
    source, out = new_topic(partitions=1), new_topic()
    name = f"stall-{uuid.uuid4().hex[:6]}"
    p = Pipeline(name, tenant="t", latency_target="1s")
    p.source(source, value=Item).map(slow_on_marked, name="slow").sink(out)
    exporter = PrometheusExporter()
    worker = Worker(
        [p],
        kafka_settings,
        WorkerConfig(group=f"g-{name}", stall_threshold_ms=200.0),
        parts=WorkerParts(exporter=exporter),
    )
    # Every stall logged: a hiccup of a loaded machine before the slow record must not use up the
    # once-per-10-s line the slow record's stall is asserted on.
    worker.loop_watch.log_every = 0.0
    caplog.set_level(logging.WARNING, logger="cadenza.worker")
    with running(worker), reading(kafka_settings, [out]) as reader:
        produce(kafka_settings, source, [(None, item(f"quick-{i}"), 0) for i in range(50)])
        reader.wait_for(lambda r: len(r[out]) >= 50, 60, "the quick records")
        runs_before = sample(exporter, "cadenza_worker_stalls_total", "run")
        seconds_before = sample(exporter, "cadenza_worker_stall_seconds_total", "run")
        produce(kafka_settings, source, [(None, item("slow"), 0)])
        reader.wait_for(lambda r: len(r[out]) >= 51, 60, "the slow record")
        time.sleep(0.2)  # the round that ran it ends
    # Only the slow record is sure to stall (a loaded machine may add others, so no exact totals).
    assert sample(exporter, "cadenza_worker_stalls_total", "run") >= runs_before + 1
    assert sample(exporter, "cadenza_worker_stall_seconds_total", "run") >= seconds_before + SLEEP_S
    lines = [r.getMessage() for r in caplog.records if "loop stalled" in r.getMessage()]
    # The quantum is the scheduler's unit: the sub-topology the map runs in, named by its first step.
    assert any(
        f"most of it in run (slowest quantum: {name}/" in line and " partition 0, " in line for line in lines
    ), lines
