"""The gauges the dashboard needs from a real worker: its pipelines' latency targets, and buffered
records and consumer lag per assigned partition (from librdkafka's statistics, each second)."""

from __future__ import annotations

import json
import time
import uuid

from cadenza.dashboard import parse_exposition
from cadenza.infra.metrics.prometheus import PrometheusExporter
from cadenza.pipelines import Pipeline
from cadenza.settings import KafkaSettings
from cadenza.testing.pytest_plugin import NewTopic
from cadenza.worker import Worker
from cadenza.worker.config import WorkerConfig
from cadenza.worker.parts import WorkerParts
from tests.worker.kafka_io import produce, running


def test_a_worker_exports_targets_partition_buffers_and_lag(
    kafka_settings: KafkaSettings, new_topic: NewTopic
) -> None:
    source, sink = new_topic(partitions=2), new_topic(partitions=1)
    pipeline = Pipeline(f"gauges-{uuid.uuid4().hex[:6]}", tenant="shop", latency_target="250ms")
    pipeline.source(source).map(lambda value: value).sink(sink)
    exporter = PrometheusExporter()
    worker = Worker(
        [pipeline],
        kafka_settings,
        WorkerConfig(group=f"g-{uuid.uuid4().hex[:8]}"),
        parts=WorkerParts(exporter=exporter),
    )
    with running(worker):
        produce(kafka_settings, source, [(None, json.dumps({"n": i}).encode(), i % 2) for i in range(20)])
        deadline = time.monotonic() + 20
        while True:
            snapshot = parse_exposition(exporter.render().decode(), 0.0)
            lag_known = {(source, 0), (source, 1)} <= set(snapshot.consumer_lag)
            if lag_known or time.monotonic() > deadline:
                break
            time.sleep(0.5)
    assert snapshot.pipelines[("shop", pipeline.name)].target_s == 0.25
    assert {(source, 0), (source, 1)} <= set(snapshot.partition_buffered)
    assert all(count >= 0 for count in snapshot.partition_buffered.values())
    assert lag_known, f"no consumer lag for {source} within 20 s: {snapshot.consumer_lag}"
    assert all(lag >= 0 for lag in snapshot.consumer_lag.values())
