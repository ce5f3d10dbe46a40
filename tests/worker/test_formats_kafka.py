"""Smaller guarantees through the real broker: Avro sinks and event time from Kafka timestamps."""

from __future__ import annotations

import json
import uuid

import pytest
from pydantic import BaseModel

from cadenza.pipelines import Pipeline, Tumbling
from cadenza.schemas import SCHEMA_FP_HEADER, AvroCodec
from cadenza.settings import KafkaSettings
from cadenza.testing.pytest_plugin import NewTopic
from cadenza.worker import Worker
from cadenza.worker.config import WorkerConfig
from cadenza.worker.engine.output import Output
from tests.worker.kafka_io import produce, reading, running

pytestmark = pytest.mark.kafka


class Order(BaseModel):
    id: int
    amount: float


class Scored(BaseModel):
    id: int
    score: float


def score(order: Order) -> Scored:
    return Scored(id=order.id, score=order.amount / 10)


def test_an_avro_sink_writes_schemaless_avro_with_the_fingerprint_header(
    kafka_settings: KafkaSettings, new_topic: NewTopic
) -> None:
    source, sink = new_topic(), new_topic()
    pipeline = Pipeline(f"avro-{uuid.uuid4().hex[:6]}", tenant="t", latency_target="1s")
    pipeline.source(source, value=Order).map(score).sink(sink, format="avro")
    produce(
        kafka_settings, source, [(None, json.dumps({"id": i, "amount": i}).encode(), 0) for i in range(20)]
    )
    codec = AvroCodec(Scored)
    worker = Worker([pipeline], kafka_settings, WorkerConfig(group=f"g-{uuid.uuid4().hex[:8]}"))
    with running(worker), reading(kafka_settings, [sink]) as reader:
        reader.wait_for(lambda got: len(got[sink]) >= 20, timeout=30, what="20 Avro records")
    records = reader.records[sink]
    assert all(r.headers.get(SCHEMA_FP_HEADER) == codec.fingerprint for r in records)
    decoded = sorted((codec.decode(r.value or b"") for r in records), key=lambda s: s.id)
    assert decoded == [Scored(id=i, score=i / 10) for i in range(20)]


def test_event_time_defaults_to_the_kafka_record_timestamp(
    kafka_settings: KafkaSettings, new_topic: NewTopic
) -> None:
    source, sink = new_topic(), new_topic()
    pipeline = Pipeline(f"kafka-ts-{uuid.uuid4().hex[:6]}", tenant="t", latency_target="1s")
    (
        pipeline.source(source, value=Order, key=str)  # no timestamp=: the record's own timestamp
        .window(Tumbling("10s"))
        .count()
        .sink(sink)
    )
    output = Output(kafka_settings)
    base_ms = 1_700_000_000_000  # a whole multiple of 10 s
    for i, offset_ms in enumerate([0, 2_500, 9_999, 10_000, 15_000, 70_000]):
        output.producer.produce(
            source, json.dumps({"id": i, "amount": 1}).encode(), b"k", timestamp=base_ms + offset_ms
        )
    output.flush()
    worker = Worker([pipeline], kafka_settings, WorkerConfig(group=f"g-{uuid.uuid4().hex[:8]}"))
    with running(worker), reading(kafka_settings, [sink]) as reader:
        reader.wait_for(lambda got: len(got[sink]) >= 2, timeout=30, what="two windows")
        reader.settle(0.5)
    got = sorted(
        (v["window_start"], v["value"]) for v in (json.loads(r.value or b"") for r in reader.records[sink])
    )
    assert got == [(base_ms / 1000, 3), (base_ms / 1000 + 10, 2)]
