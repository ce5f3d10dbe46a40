"""Each sub-topology's true and observed rates, measured by a worker through the real broker: exported
as gauges, and published on the feedback topic."""

from __future__ import annotations

import itertools
import json
import time
import uuid

import pytest
from pydantic import BaseModel

from cadenza.feedback.records import KIND_HEADER, TRUE_RATES_KIND
from cadenza.infra.metrics import names
from cadenza.pipelines import Pipeline
from cadenza.scaling import TrueRates, parse_true_rates
from cadenza.settings import KafkaSettings
from cadenza.testing.pytest_plugin import NewTopic
from cadenza.worker import Worker
from cadenza.worker.components import CostFeedback
from cadenza.worker.config import WorkerConfig
from tests.worker.kafka_io import Record, produce, reading, running

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
    worker = Worker([pipeline], kafka_settings, WorkerConfig(group=f"g-{uuid.uuid4().hex[:8]}"))
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


def _true_rates(records: list[Record]) -> list[TrueRates]:
    return [parse_true_rates(r.value) for r in records if r.headers.get(KIND_HEADER) == TRUE_RATES_KIND]


def test_a_worker_publishes_its_true_rates_on_the_feedback_topic(
    kafka_settings: KafkaSettings, new_topic: NewTopic
) -> None:
    source, sink, feedback = new_topic(partitions=2), new_topic(partitions=2), new_topic(partitions=1)
    name = f"rates-{uuid.uuid4().hex[:6]}"
    pipeline = Pipeline(name, tenant="acme", latency_target="5s")
    pipeline.source(source, value=Item).map(lambda x: x.id).sink(sink)
    records = 200
    produce(
        kafka_settings,
        source,
        [(None, json.dumps({"id": i, "user": "u"}).encode(), None) for i in range(records)],
    )
    worker_id = f"w-{uuid.uuid4().hex[:6]}"
    worker = Worker(
        [pipeline],
        kafka_settings,
        WorkerConfig(group=f"g-{uuid.uuid4().hex[:8]}", feedback_topic=feedback, worker_id=worker_id),
    )
    worker.rate_window_s = 0.5

    def processed(got: dict[str, list[Record]]) -> float:
        # windows are contiguous from the start: their processed records add up to every record
        return sum(
            entry.observed_processing * (window.window_end - window.window_start)
            for window in _true_rates(got[feedback])
            for entry in window.rates
            if entry.sub_topology == source
        )

    with reading(kafka_settings, [sink, feedback]) as reader, running(worker):
        reader.wait_for(lambda got: len(got[sink]) >= records, timeout=60, what="every output")
        # nothing scrapes this worker: its own loop closes the windows and publishes them
        reader.wait_for(
            lambda got: round(processed(got)) >= records, timeout=30, what="rates of every record"
        )
        consumer = next(c.feedback for c in worker._components.components if isinstance(c, CostFeedback))
        deadline = time.monotonic() + 30
        while consumer.other_kinds < 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert consumer.other_kinds >= 1 and consumer.malformed == 0 and consumer.received == 0
    published = [r for r in reader.records[feedback] if r.headers.get(KIND_HEADER) == TRUE_RATES_KIND]
    assert published and all(r.key == worker_id.encode() for r in published)
    windows = _true_rates(published)
    assert round(processed(reader.records)) == records
    assert all(w.worker == worker_id and w.window_end - w.window_start >= 0.5 for w in windows)
    assert all(a.window_end == b.window_start for a, b in itertools.pairwise(windows))
    busy = [e for w in windows for e in w.rates if e.sub_topology == source and e.observed_processing > 0]
    assert busy and all(e.true_processing > 0 and (e.tenant, e.pipeline) == ("acme", name) for e in busy)
    # a record's useful time is part of the wall time; one output per input
    assert all(e.observed_processing <= e.true_processing for e in busy)
    assert all(e.true_output == pytest.approx(e.true_processing) for e in busy)
