"""Spans through the real broker: sampled, batched, keyed by trace, readable with spans.avsc."""

from __future__ import annotations

import io
from importlib.resources import files

import avro.io
import avro.schema
import pytest

from cadenza.infra.kafka.headers import get_header
from cadenza.infra.metrics.emitter import SpanEmitter
from cadenza.infra.metrics.sampling import is_sampled
from cadenza.infra.metrics.spans import SPAN_CODEC, decode_span, span_key
from cadenza.schemas import SCHEMA_FP_HEADER
from cadenza.settings import KafkaSettings
from cadenza.testing.pytest_plugin import NewTopic
from tests.infra.metrics.kafka_read import read_all

pytestmark = pytest.mark.kafka

SPANS_SCHEMA = avro.schema.parse(files("cadenza.schemas").joinpath("spans.avsc").read_text(encoding="utf-8"))
T_F = 1_700_000_000.0
TRACES = 2000
RATIO = 0.25


def test_sampled_spans_reach_the_metrics_topic(kafka_settings: KafkaSettings, new_topic: NewTopic) -> None:
    topic = new_topic(partitions=2)
    emitter = SpanEmitter.to_kafka(
        kafka_settings, topic, worker_id="worker-a", sample_ratio=RATIO, batch_size=100, linger=0.2
    )
    with emitter:
        for trace in range(TRACES):
            # Two operators per trace: a trace is kept or dropped whole.
            emitter.emit("ads", "clicks", "map", trace % 4, trace, 0.001, 0.002, T_F, 0.5, T_F + 0.1)
            emitter.emit("ads", "clicks", "sink", trace % 4, trace, 0.003, 0.004, T_F, 0.5, T_F + 0.6, True)
    expected = {t for t in range(TRACES) if is_sampled(t, RATIO)}
    assert emitter.dropped == 0
    assert emitter.delivered == 2 * len(expected)

    records = read_all(kafka_settings, topic, partitions=2)
    assert len(records) == 2 * len(expected)
    partition_of: dict[int, int] = {}
    by_operator: dict[str, set[int]] = {"map": set(), "sink": set()}
    for message in records:
        value = message.value()
        assert value is not None
        assert get_header(message.headers(), SCHEMA_FP_HEADER) == SPAN_CODEC.fingerprint
        # The schema file is the contract: Apache Avro's reader, given only spans.avsc, reads it.
        reference = avro.io.DatumReader(SPANS_SCHEMA, SPANS_SCHEMA).read(
            avro.io.BinaryDecoder(io.BytesIO(value))
        )
        assert isinstance(reference, dict)
        span = decode_span(value, message.headers())
        assert reference["trace_id"] & (2**64 - 1) == span.trace_id
        assert message.key() == span_key(span.trace_id)
        assert partition_of.setdefault(span.trace_id, message.partition() or 0) == (message.partition() or 0)
        assert span.worker_id == "worker-a" and span.sample_ratio == RATIO
        by_operator[span.operator_id].add(span.trace_id)
        if span.operator_id == "sink":
            assert reference["met"] is False and span.e2e_latency_s == pytest.approx(0.6)
        else:
            assert reference["met"] is None and reference["e2e_latency_s"] is None
    assert by_operator == {"map": expected, "sink": expected}
