"""Each sub-topology's true and observed rates, measured by a worker through the real broker."""

from __future__ import annotations

import json
import time
import uuid

import pytest
from pydantic import BaseModel

from cadenza.infra.metrics import names
from cadenza.pipelines import Pipeline
from cadenza.settings import KafkaSettings
from cadenza.testing.pytest_plugin import NewTopic
from cadenza.worker import Worker
from tests.worker.kafka_io import produce, reading, running

pytestmark = pytest.mark.kafka


class Item(BaseModel):
    id: int
    user: str


def _gauges(scraped: str, metric: str) -> dict[str, float]:
    """sub_topology label -> value of one gauge in a Prometheus exposition."""
    values = {}
    for line in scraped.splitlines():
        if line.startswith(metric + "{"):
            labels, value = line.rsplit(" ", 1)
            sub = labels.split('sub_topology="', 1)[1].split('"', 1)[0]
            values[sub] = float(value)
    return values


def test_true_and_observed_rates_per_sub_topology(kafka_settings: KafkaSettings, new_topic: NewTopic) -> None:
    source, sink = new_topic(partitions=2), new_topic(partitions=2)
    name = f"rates-{uuid.uuid4().hex[:6]}"
    pipeline = Pipeline(name, tenant="acme", latency_target="5s")
    # one record in, two out of the keyed sub-topology: its true output rate is twice its processing
    pipeline.source(source, value=Item).key_by(lambda x: x.user).flat_map(lambda x: [x.id, x.id]).sink(sink)
    records = 300
    produce(
        kafka_settings,
        source,
        [(None, json.dumps({"id": i, "user": f"u{i % 7}"}).encode(), None) for i in range(records)],
    )
    worker = Worker([pipeline], kafka_settings, group=f"g-{uuid.uuid4().hex[:8]}")
    worker.rate_window_s = 0.5
    with reading(kafka_settings, [sink]) as reader, running(worker):
        started = time.monotonic()
        reader.wait_for(lambda got: len(got[sink]) >= 2 * records, timeout=60, what="every output")
        time.sleep(max(0.0, 0.6 - (time.monotonic() - started)))
        samples = worker.rates.sample()
        scraped = worker.exporter.render().decode()
    repartition = f"{name}.2-key_by.repartition"
    assert set(samples) == {("acme", name, source), ("acme", name, repartition)}
    first, second = samples[("acme", name, source)], samples[("acme", name, repartition)]
    assert (first.processed, first.produced) == (records, records)  # repartition records count
    assert (second.processed, second.produced) == (records, 2 * records)
    assert first.busy_s > 0 and second.busy_s > 0

    true_processing = _gauges(scraped, names.TRUE_PROCESSING_RATE.name)
    true_output = _gauges(scraped, names.TRUE_OUTPUT_RATE.name)
    observed = _gauges(scraped, names.OBSERVED_PROCESSING_RATE.name)
    observed_output = _gauges(scraped, names.OBSERVED_OUTPUT_RATE.name)
    assert set(true_processing) == set(true_output) == set(observed) == {source, repartition}
    # the first window opened at start with every counter at zero and covers the whole run
    for topic, sample in ((source, first), (repartition, second)):
        assert true_processing[topic] == pytest.approx(sample.processed / sample.busy_s)
        assert true_output[topic] == pytest.approx(sample.produced / sample.busy_s)
        # a record's useful time is part of the wall time: observed rates never exceed true ones
        assert 0 < observed[topic] <= true_processing[topic]
        assert observed_output[topic] == pytest.approx(observed[topic] * sample.produced / sample.processed)
