"""The stats job on local Spark against the real broker: statistics, bad spans, and the worker's side."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from pydantic import BaseModel
from pyspark.sql import SparkSession

from cadenza.feedback.consumer import FeedbackConsumer
from cadenza.feedback.records import KIND_HEADER, FeedbackRecord, decode_feedback
from cadenza.feedback.stats_job import DEFAULT_ACCURACY, StatsConfig, start_stats
from cadenza.infra.metrics.spans import SPAN_CODEC, encode_span
from cadenza.pipelines import Pipeline
from cadenza.scheduling.costs import CostModel
from cadenza.schemas.codecs import SCHEMA_FP_HEADER
from cadenza.settings import KafkaSettings
from cadenza.testing.pytest_plugin import NewTopic
from cadenza.worker import Worker
from cadenza.worker.components import CostFeedback
from cadenza.worker.config import WorkerConfig
from tests.feedback.span_data import direct_stats, generate_spans, produce_spans, rank_bounds
from tests.infra.spark.kafka_helpers import consume_all
from tests.worker.kafka_io import running

pytestmark = pytest.mark.kafka

QUERY_TIMEOUT = 120
WINDOW_S, SLIDE_S = 20.0, 10.0


def run_stats(
    spark: SparkSession, settings: KafkaSettings, metrics: str, feedback: str, checkpoint: Path
) -> int:
    """Run the job over what the metrics topic holds now; return the malformed count."""
    job = start_stats(
        spark,
        settings,
        StatsConfig(
            metrics_topic=metrics,
            feedback_topic=feedback,
            window=f"{WINDOW_S:g} seconds",
            slide=f"{SLIDE_S:g} seconds",
            watermark="1 minute",
            trigger="availableNow",
            checkpoint=checkpoint,
            starting_offsets="earliest",
        ),
    )
    if not job.query.awaitTermination(QUERY_TIMEOUT):
        job.stop()
        raise AssertionError(f"stats query did not finish within {QUERY_TIMEOUT}s")
    return job.malformed


def read_feedback(settings: KafkaSettings, topic: str) -> list[FeedbackRecord]:
    """The statistics on the topic; records of another ``cadenza-kind`` (a running worker publishes
    its true rates there every rate window) are skipped, as the workers' feedback reader skips them."""
    records = consume_all(settings, topic, partitions=1)
    records = [r for r in records if all(name != KIND_HEADER for name, _ in r.headers)]
    for record in records:
        assert record.key is not None and record.key.count(b"\x00") == 2
    return [decode_feedback(r.value, list(r.headers)) for r in records]


def test_stats_match_a_direct_computation_and_bad_spans_are_counted_and_skipped(
    spark: SparkSession, kafka_settings: KafkaSettings, new_topic: NewTopic, tmp_path: Path
) -> None:
    """Counts, miss ratios and rates exact; percentiles within percentile_approx's rank error."""
    metrics, feedback = new_topic(partitions=2), new_topic(partitions=1)
    spans = generate_spans(seed=5, count=1200, span_s=45.0)
    good = encode_span(spans[0])
    fp: list[tuple[str, str | bytes | None]] = list(SPAN_CODEC.headers())
    bad: list[tuple[bytes, list[tuple[str, str | bytes | None]]]] = [
        (b"\x00garbage", fp),  # not a span
        (good, [(SCHEMA_FP_HEADER, b"\x01" * 8)]),  # another schema's fingerprint
        (good + b"\x00", fp),  # trailing bytes
        (encode_span(spans[1]._replace(sample_ratio=0.0)), fp),  # weight 1/0
        (encode_span(spans[2]._replace(run_time_s=float("nan"))), fp),
    ]
    produce_spans(kafka_settings, metrics, spans, bad)

    malformed = run_stats(spark, kafka_settings, metrics, feedback, tmp_path / "checkpoint")

    assert malformed == len(bad)
    expected = direct_stats(spans, WINDOW_S, SLIDE_S)
    got = {
        (r.pipeline_id, r.operator_id, r.tenant_id, r.window_start, r.window_end): r
        for r in read_feedback(kafka_settings, feedback)
    }
    assert sorted(got) == sorted(expected)
    for key, want in expected.items():
        record = got[key]
        assert record.count == want.count, key
        assert record.true_processing_rate == pytest.approx(want.true_processing_rate, rel=1e-9), key
        if want.deadline_miss_ratio is None:
            assert record.deadline_miss_ratio is None and record.e2e_p50 is None, key
        else:
            assert record.deadline_miss_ratio == pytest.approx(want.deadline_miss_ratio, rel=1e-9), key
        for name, values in (
            ("run_time", want.run_times),
            ("queue_wait", want.queue_waits),
            ("e2e", want.e2e),
        ):
            if not values:
                continue
            for p in (50, 95, 99):
                low, high = rank_bounds(values, p / 100, DEFAULT_ACCURACY)
                value = getattr(record, f"{name}_p{p}")
                assert low <= value <= high, (key, name, p, value, low, high)
                assert value in values, "percentile_approx returns one of the inputs"


def test_feedback_from_the_job_changes_a_workers_cost_estimates(
    spark: SparkSession, kafka_settings: KafkaSettings, new_topic: NewTopic, tmp_path: Path
) -> None:
    """FeedbackConsumer + CostModel, as a worker runs them, pick up the job's newest window."""
    metrics, feedback = new_topic(partitions=1), new_topic(partitions=1)
    spans = generate_spans(seed=11, count=400, span_s=15.0)
    produce_spans(kafka_settings, metrics, spans, [])
    model = CostModel()
    model.add_pipeline("orders", {"1-source": ["2-map"], "2-map": ["3-sink"], "3-sink": []})
    before = {op: model.estimate("orders", op) for op in ("2-map", "3-sink")}
    path_before = model.path_cost("orders", "1-source")

    assert run_stats(spark, kafka_settings, metrics, feedback, tmp_path / "checkpoint") == 0

    consumer = FeedbackConsumer(kafka_settings, feedback)
    consumer.open()
    try:
        records = read_feedback(kafka_settings, feedback)
        assert consumer.wait_for(len(records), timeout=30)
        assert consumer.malformed == consumer.invalid == 0
        applied = consumer.apply_pending(model)
    finally:
        consumer.close()
    newest: dict[tuple[str, str], FeedbackRecord] = {}
    for record in records:
        key = (record.pipeline_id, record.operator_id)
        if key not in newest or record.window_end > newest[key].window_end:
            newest[key] = record
    assert applied == len(newest)
    for op in ("2-map", "3-sink"):
        record = newest[("orders", op)]
        mean = record.mean_run_time
        assert mean is not None
        weight = 1 - (1 - model.alpha) ** record.count
        assert model.estimate("orders", op) == pytest.approx(before[op] + weight * (mean - before[op]))
        assert model.estimate("orders", op) != pytest.approx(before[op])
    assert model.path_cost("orders", "1-source") != pytest.approx(path_before)
    assert model.estimate("clicks", "2-filter") == pytest.approx(
        1 / newest[("clicks", "2-filter")].true_processing_rate, rel=0.05
    )


class Order(BaseModel):
    id: int


def test_feedback_from_the_job_moves_a_running_workers_cost_estimate(
    spark: SparkSession, kafka_settings: KafkaSettings, new_topic: NewTopic, tmp_path: Path
) -> None:
    """The whole loop through a real Worker: spans named after the worker's pipeline and operator ->
    the stats job -> the feedback topic -> the worker's feedback consumer -> its policy's cost model,
    while the worker runs (it processes no record, so only the feedback can move the estimate)."""
    source, sink = new_topic(partitions=1), new_topic(partitions=1)
    metrics, feedback = new_topic(partitions=1), new_topic(partitions=1)
    name = f"orders-{uuid.uuid4().hex[:6]}"
    pipeline = Pipeline(name, tenant="shop", latency_target="1s")
    pipeline.source(source, value=Order).map(lambda order: order.id).sink(sink)
    worker = Worker(
        [pipeline], kafka_settings, WorkerConfig(group=f"g-{uuid.uuid4().hex[:8]}", feedback_topic=feedback)
    )
    with running(worker):
        model = worker.cost_model
        assert model is not None
        # A worker's spans name the sub-topology it ran (its entry operator) and the sink.
        (operator,) = model.operators(name)
        before = model.estimate(name, operator)
        spans = [
            span._replace(pipeline_id=name, operator_id=operator if span.operator_id == "2-map" else "3-sink")
            for span in generate_spans(seed=13, count=400, span_s=15.0)
            if span.pipeline_id == "orders"
        ]
        produce_spans(kafka_settings, metrics, spans, [])

        assert run_stats(spark, kafka_settings, metrics, feedback, tmp_path / "checkpoint") == 0
        published = time.monotonic()

        records = [r for r in read_feedback(kafka_settings, feedback) if r.operator_id == operator]
        newest = max(records, key=lambda r: (r.window_end, r.produced_at))
        target = newest.mean_run_time
        assert target is not None and newest.count >= 20
        # Older windows applied first leave at most (1 - alpha) ** count of their difference.
        deadline = published + 30
        while model.estimate(name, operator) != pytest.approx(target, rel=1e-2):
            assert time.monotonic() < deadline, (
                f"estimate {model.estimate(name, operator)} did not reach {target} within 30 s"
            )
            time.sleep(0.02)
        delay = time.monotonic() - published
        feedback_consumer = next(
            c.feedback for c in worker._components.components if isinstance(c, CostFeedback)
        )
    assert before != pytest.approx(target, rel=0.1)
    assert feedback_consumer.applied >= 1
    assert feedback_consumer.malformed == feedback_consumer.invalid == 0
    print(f"feedback visible to the worker {delay:.2f}s after the stats job ended")
