"""Where a result's latency goes, per stage, through a real broker: each stage histogram observes every
record (or result) that passes the stage, once, with a plausible duration, and nothing else.

Event times are wall-clock times here (as S1's sources stamp them), so the window close wait means
something: the closing records are sent after the windows' ends, and each result's wait is bounded by
how long the test took.
"""

from __future__ import annotations

import json
import math
import time
import uuid

import pytest
from prometheus_client import generate_latest
from pydantic import BaseModel

from cadenza.infra.metrics.prometheus import LatencyHistogram, PrometheusExporter
from cadenza.pipelines import Pipeline, Tumbling
from cadenza.settings import KafkaSettings
from cadenza.testing.pytest_plugin import NewTopic
from cadenza.worker import Worker
from cadenza.worker.config import WorkerConfig
from cadenza.worker.parts import WorkerParts
from tests.worker.kafka_io import Outgoing, produce, reading, running

pytestmark = pytest.mark.kafka


class Click(BaseModel):
    user: str
    ts: float


def user_of(click: Click) -> str:
    return click.user


def clicks(times: list[float], partition: int) -> list[Outgoing]:
    return [
        (None, json.dumps({"user": f"u{i % 3}", "ts": t}).encode(), partition) for i, t in enumerate(times)
    ]


def mean(histogram: LatencyHistogram) -> float:
    return histogram.sum / histogram.count if histogram.count else math.nan


def test_each_stage_is_observed_once_per_record_with_a_plausible_duration(
    kafka_settings: KafkaSettings, new_topic: NewTopic
) -> None:
    source, out = new_topic(partitions=2), new_topic()
    name = f"stages-{uuid.uuid4().hex[:6]}"
    p = Pipeline(name, tenant="t", latency_target="1s")
    p.source(source, value=Click, timestamp="ts", max_out_of_orderness="50ms").key_by(user_of).window(
        Tumbling("1s")
    ).count().sink(out)
    exporter = PrometheusExporter()
    worker = Worker(
        [p],
        kafka_settings,
        WorkerConfig(group=f"g-{name}", watermark_idle_timeout=0),
        parts=WorkerParts(exporter=exporter),
    )
    started = time.time()
    with running(worker), reading(kafka_settings, [out]) as reader:
        # Six records per source partition inside one window of wall-clock time: their 50 ms must not
        # straddle a second, or the first window holds two users' counts, not three (a start in the
        # last 20 ms of a second did that: about one run in 50, by the arithmetic).
        if time.time() % 1.0 > 0.9:
            time.sleep(1.0 - time.time() % 1.0 + 0.01)
        first = time.time()
        produce(kafka_settings, source, clicks([first + i * 0.01 for i in range(6)], 0))
        produce(kafka_settings, source, clicks([first + i * 0.01 for i in range(6)], 1))
        # ... then, once those windows have ended, one record per partition that closes them.
        time.sleep(max(0.0, math.floor(first) + 1.2 - time.time()))
        late_enough = time.time()
        produce(kafka_settings, source, clicks([late_enough], 0) + clicks([late_enough], 1))
        reader.wait_for(lambda r: len(r[out]) >= 3, 60, "a count per user of the first window")
        results = len(reader.records[out])
        # The acknowledgements are timed when the worker flushes (at its commits); let one happen.
        time.sleep(1.5)
    elapsed = time.time() - started
    schedules = {s.task.subtopology.input_kind: s for s in worker.engine.schedules}
    at_source, at_window = schedules["source"].metrics, schedules["repartition"].metrics
    (window_op,) = schedules["repartition"].task.windows
    window = exporter.operator("t", name, window_op.node_id)
    nodes = {node.kind: node.id for node in p.compile().nodes}
    key_by = exporter.operator("t", name, nodes["key_by"])
    sink = exporter.operator("t", name, nodes["sink"])

    # Fetch: every source record, once; the reader of the repartition topic observes the hop instead.
    assert at_source.fetch_latency.count == 14
    assert at_source.repartition_hop.count == 0
    assert at_window.repartition_hop.count == 14  # records only: the progress records are not counted
    assert at_window.fetch_latency.count == 0
    for histogram in (at_source.fetch_latency, at_window.repartition_hop):
        assert 0.0 <= mean(histogram) < elapsed
    # Produce acknowledgement: every repartition record (and progress record) at the key_by, every
    # result at the sink.
    assert worker.counters.progress_records > 0
    assert key_by.produce_ack.count == 14 + worker.counters.progress_records
    assert sink.produce_ack.count == results >= 3
    assert 0.0 < mean(sink.produce_ack) < elapsed
    # Window close wait: one per result, from end + out-of-orderness to the close.
    assert window.window_close_wait.count == results
    assert 0.0 <= mean(window.window_close_wait) < elapsed
    text = generate_latest(exporter.registry).decode()
    for metric in (
        "cadenza_fetch_latency_seconds_bucket",
        "cadenza_repartition_hop_seconds_bucket",
        "cadenza_produce_ack_seconds_bucket",
        "cadenza_window_close_wait_seconds_bucket",
    ):
        assert metric in text
