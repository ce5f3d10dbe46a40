"""Feedback through the real broker: records published by hand change the worker's cost model."""

from __future__ import annotations

import dataclasses

import pytest

from cadenza.feedback.consumer import FeedbackConsumer
from cadenza.feedback.records import FEEDBACK_CODEC, FeedbackRecord, encode_feedback
from cadenza.infra.kafka.clients import DeliveryReport, flush_or_raise, make_producer
from cadenza.infra.kafka.errors import TopicError
from cadenza.infra.metrics.prometheus import PrometheusExporter
from cadenza.scheduling import CostModel
from cadenza.schemas import SCHEMA_FP_HEADER
from cadenza.settings import KafkaSettings
from cadenza.testing.pytest_plugin import NewTopic

pytestmark = pytest.mark.kafka

BASE = FeedbackRecord(
    pipeline_id="clicks",
    operator_id="map",
    tenant_id="ads",
    window_start=1_700_000_000.0,
    window_end=1_700_000_010.0,
    count=1,
    run_time_p50=0.1,
    run_time_p95=0.2,
    run_time_p99=0.3,
    queue_wait_p50=0.0,
    queue_wait_p95=0.0,
    queue_wait_p99=0.0,
    true_processing_rate=8.0,
    produced_at=1_700_000_011.0,
)


Outgoing = tuple[bytes | None, bytes, list[tuple[str, bytes]]]


def publish(settings: KafkaSettings, topic: str, records: list[Outgoing]) -> None:
    producer, errors = make_producer(settings)
    report = DeliveryReport()
    for key, value, headers in records:
        wire: list[tuple[str, str | bytes | None]] = [*headers]
        producer.produce(topic, value=value, key=key, headers=wire, on_delivery=report)
    flush_or_raise(producer, report, timeout=30)
    errors.raise_fatal()


def as_record(record: FeedbackRecord) -> Outgoing:
    return record.key, encode_feedback(record), FEEDBACK_CODEC.headers()


def test_feedback_changes_estimate_and_upstream_path_cost(
    kafka_settings: KafkaSettings, new_topic: NewTopic
) -> None:
    topic = new_topic(partitions=2)
    # Powers of two everywhere, so every expected value below is exact in binary floating point.
    model = CostModel(default_cost=0.25, alpha=0.5, recompute_tolerance=0.0)
    model.add_pipeline("clicks", {"src": ["map"], "map": ["sink"]})
    assert model.path_cost("clicks", "src") == 0.75

    older = BASE  # mean run time 1/8 s over one record
    newer = dataclasses.replace(  # mean 1/2 s over two records, a later window
        BASE, window_start=1_700_000_010.0, window_end=1_700_000_020.0, count=2, true_processing_rate=2.0
    )
    stale = dataclasses.replace(BASE, window_end=1_700_000_005.0, true_processing_rate=1.0)
    unusable = dataclasses.replace(BASE, operator_id="sink", count=0)
    publish(
        kafka_settings,
        topic,
        [
            as_record(older),
            as_record(newer),
            as_record(stale),  # same key, hence same partition, after the newer window
            as_record(unusable),
            (b"junk", b"\xff\xfe not avro", []),
            (older.key, encode_feedback(older), [(SCHEMA_FP_HEADER, b"\x00" * 8)]),  # another schema
        ],
    )

    exporter = PrometheusExporter()
    with FeedbackConsumer(kafka_settings, topic) as feedback:
        exporter.track_feedback(feedback)
        assert feedback.wait_for(6, timeout=30.0), f"read {feedback.received} of 6 feedback records"
        # Nothing touches the model until the executor applies what is pending.
        assert model.estimate("clicks", "map") == 0.25
        assert feedback.apply_pending(model) == 1
        assert feedback.apply_pending(model) == 0

    # newer superseded older before it was applied: one blend of 1/2 s with weight 1 - (1 - 0.5)**2.
    assert model.estimate("clicks", "map") == 0.25 + 0.75 * (0.5 - 0.25) == 0.4375
    assert model.path_cost("clicks", "map") == 0.4375 + 0.25
    assert model.path_cost("clicks", "src") == 0.25 + 0.4375 + 0.25 == 0.9375
    assert model.estimate("clicks", "sink") == 0.25  # the unusable record was skipped

    assert (feedback.malformed, feedback.invalid, feedback.outdated, feedback.superseded) == (2, 1, 1, 1)
    text = exporter.render().decode()
    assert 'cadenza_feedback_applied_total{operator="map",pipeline="clicks",tenant="ads"} 1.0' in text
    assert 'cadenza_feedback_rejected_total{reason="malformed"} 2.0' in text
    assert 'cadenza_feedback_rejected_total{reason="invalid"} 1.0' in text
    assert 'cadenza_feedback_rejected_total{reason="outdated"} 1.0' in text
    assert "cadenza_feedback_superseded_total 1.0" in text


def test_every_consumer_sees_every_record(kafka_settings: KafkaSettings, new_topic: NewTopic) -> None:
    topic = new_topic(partitions=3)
    records = [
        dataclasses.replace(BASE, operator_id=f"op{i}", true_processing_rate=4.0, count=1) for i in range(6)
    ]
    publish(kafka_settings, topic, [as_record(r) for r in records])
    models = [CostModel(default_cost=0.5, alpha=0.5, recompute_tolerance=0.0) for _ in range(2)]
    consumers = [FeedbackConsumer(kafka_settings, topic, statistic="mean") for _ in range(2)]
    try:
        for consumer in consumers:
            assert consumer.open(timeout=10.0) == [0, 1, 2]
        for consumer, model in zip(consumers, models, strict=True):
            # Without a thread: the owner polls, then applies, on its own thread.
            assert consumer.wait_for(6, timeout=30.0)
            assert consumer.apply_pending(model) == 6
    finally:
        for consumer in consumers:
            consumer.close()
    for model in models:
        assert [model.estimate("clicks", f"op{i}") for i in range(6)] == [0.375] * 6


def test_p95_statistic_can_be_chosen(kafka_settings: KafkaSettings, new_topic: NewTopic) -> None:
    topic = new_topic()
    publish(kafka_settings, topic, [as_record(dataclasses.replace(BASE, count=1, run_time_p95=0.75))])
    model = CostModel(default_cost=0.25, alpha=0.5, recompute_tolerance=0.0)
    with FeedbackConsumer(kafka_settings, topic, statistic="p95") as feedback:
        assert feedback.wait_for(1, timeout=30.0)
        feedback.apply_pending(model)
    assert model.estimate("clicks", "map") == 0.25 + 0.5 * (0.75 - 0.25)


def test_a_missing_topic_is_a_clear_error(kafka_settings: KafkaSettings) -> None:
    feedback = FeedbackConsumer(kafka_settings, "cadenza-no-such-feedback-topic")
    with pytest.raises(TopicError, match="does not exist"):
        feedback.open(timeout=5.0)
    feedback.close()
