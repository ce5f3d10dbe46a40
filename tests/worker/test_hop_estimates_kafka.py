"""A worker counts the repartition hop it measures in the start deadlines upstream of it, through a real
broker: after records cross a key_by's repartition topic, the source sub-topology's path cost holds
the hop, an estimate within the buckets the hop histogram counted; with ``hop_quantile=0`` it does not."""

from __future__ import annotations

import json
import time
import uuid

import pytest

from cadenza.infra.metrics.names import LATENCY_BUCKETS
from cadenza.infra.metrics.prometheus import PrometheusExporter
from cadenza.pipelines import Pipeline
from cadenza.scheduling.costs import CostModel
from cadenza.settings import KafkaSettings
from cadenza.testing.pytest_plugin import NewTopic
from cadenza.worker import Worker
from cadenza.worker.config import WorkerConfig
from cadenza.worker.parts import WorkerParts
from tests.worker.kafka_io import produce, reading, running

pytestmark = pytest.mark.kafka

RECORDS = 60


def run_through_a_repartition(
    kafka_settings: KafkaSettings, new_topic: NewTopic, hop_quantile: float
) -> tuple[Worker, str]:
    source, out = new_topic(partitions=2), new_topic()
    name = f"hops-{uuid.uuid4().hex[:6]}"
    p = Pipeline(name, tenant="t", latency_target="1s")
    p.source(source).key_by(lambda v: v["k"]).sink(out)
    worker = Worker(
        [p],
        kafka_settings,
        WorkerConfig(group=f"g-{name}", hop_quantile=hop_quantile),
        parts=WorkerParts(exporter=PrometheusExporter()),
    )
    with running(worker), reading(kafka_settings, [out]) as reader:
        records = [(None, json.dumps({"k": f"k{i % 5}"}).encode(), i % 2) for i in range(RECORDS)]
        produce(kafka_settings, source, records)
        reader.wait_for(lambda r: len(r[out]) >= RECORDS, 60, "every record through the repartition")
        # The estimates are refreshed once a second on the worker's loop: let two refreshes pass.
        time.sleep(2.5)
    return worker, name


def assert_path_cost_counts(costs: CostModel, name: str, source: str, reader: str, hop: float) -> None:
    """The source's path cost is its own estimate, the hop and the reader's path cost. Its own share
    is the estimate as of its last drift beyond the recompute tolerance (a later observation within
    it does not recompute paths), so it is compared within that tolerance, not exactly."""
    own = costs.path_cost(name, source) - (hop + costs.path_cost(name, reader))
    estimate = costs.estimate(name, source)
    assert abs(own - estimate) <= costs.recompute_tolerance * own * (1 + 1e-9)


def test_the_source_path_cost_counts_the_measured_hop(
    kafka_settings: KafkaSettings, new_topic: NewTopic
) -> None:
    worker, name = run_through_a_repartition(kafka_settings, new_topic, 0.99)
    schedules = {s.task.subtopology.input_kind: s for s in worker.engine.schedules}
    source, reader = schedules["source"].operator_id, schedules["repartition"].operator_id
    histogram = schedules["repartition"].arrival
    assert histogram.count == RECORDS
    costs = worker.cost_model
    assert costs is not None
    hop = costs.hop(name, reader)
    # Within the buckets the histogram counted: from the lowest one's lower bound to the highest's top.
    used = [i for i, count in enumerate(histogram.counts) if count]
    lowest = 0.0 if used[0] == 0 else LATENCY_BUCKETS[used[0] - 1]
    highest = LATENCY_BUCKETS[min(used[-1], len(LATENCY_BUCKETS) - 1)]
    assert hop > 0.0
    assert lowest <= hop <= highest
    assert_path_cost_counts(costs, name, source, reader, hop)
    assert costs.hop(name, source) == 0.0  # a source topic is no hop
    # What the scheduler plans with is exported beside what was measured.
    planned = f'cadenza_planned_hop_seconds{{operator="{reader}",pipeline="{name}",tenant="t"}} {hop!r}'
    assert planned in worker.exporter.render().decode()


def test_hop_quantile_zero_leaves_the_hop_out(kafka_settings: KafkaSettings, new_topic: NewTopic) -> None:
    worker, name = run_through_a_repartition(kafka_settings, new_topic, 0.0)
    schedules = {s.task.subtopology.input_kind: s for s in worker.engine.schedules}
    source, reader = schedules["source"].operator_id, schedules["repartition"].operator_id
    assert schedules["repartition"].arrival.count == RECORDS  # measured all the same
    costs = worker.cost_model
    assert costs is not None
    assert costs.hop(name, reader) == 0.0
    assert_path_cost_counts(costs, name, source, reader, 0.0)
    assert "cadenza_planned_hop_seconds" not in worker.exporter.render().decode()
