"""The demo's feedback loop: the stats job over the spans S1's workers wrote, and what a worker learns.

Runs ``cadenza stats`` (the Structured Streaming job) once over the spans topic
(``trigger=availableNow``), reads the feedback records it published with the workers'
:class:`~cadenza.infra.metrics.FeedbackConsumer`, and folds them into a cost model, as a worker
started with ``--feedback-topic`` does. Returns one row per operator: the statistics and the
estimate before and after.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cadenza.feedback.consumer import FeedbackConsumer
from cadenza.infra.kafka.clients import make_admin
from cadenza.infra.kafka.topics import ensure_topics
from cadenza.infra.metrics.topics import metrics_topic_specs
from cadenza.scheduling.costs import CostModel
from cadenza.settings import KafkaSettings


def spark_available() -> bool:
    try:
        import pyspark  # noqa: F401, PLC0415
    except ImportError:
        return False
    return True


def run_feedback_loop(
    settings: KafkaSettings, spans_topic: str, progress: Callable[[str], None] = print
) -> list[dict[str, Any]]:
    from cadenza.feedback.stats_job import StatsConfig, start_stats  # noqa: PLC0415
    from cadenza.infra.spark import register, spark_session  # noqa: PLC0415

    feedback_topic = f"{spans_topic}-feedback-{uuid.uuid4().hex[:6]}"
    ensure_topics(make_admin(settings), metrics_topic_specs(spans_topic, feedback_topic))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # a local job: no hostname lookup warnings
    progress("stats job: starting Spark (local[2]) over the spans the workers sent")
    started = time.monotonic()
    spark = spark_session("cadenza-demo-stats", ui=False, config={"spark.sql.session.timeZone": "UTC"})
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    consumer = FeedbackConsumer(settings, feedback_topic)
    consumer.start()
    model = CostModel()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            config = StatsConfig(
                metrics_topic=spans_topic,
                feedback_topic=feedback_topic,
                window="60 seconds",
                slide="30 seconds",
                watermark="5 minutes",
                trigger="availableNow",
                checkpoint=Path(tmp) / "stats",
                starting_offsets="earliest",
            )
            job = start_stats(spark, settings, config)
            job.query.awaitTermination()
            written, malformed = job.written, job.malformed
        deadline = time.monotonic() + 30
        while consumer.received < written and time.monotonic() < deadline:
            time.sleep(0.1)
        records = sorted(
            consumer.pending_records(), key=lambda r: (r.tenant_id, r.pipeline_id, r.operator_id)
        )
        before = {
            (r.pipeline_id, r.operator_id): model.estimate(r.pipeline_id, r.operator_id) for r in records
        }
        consumer.apply_pending(model)  # what a worker started with --feedback-topic does
        rows = [
            {
                "system": _system_of(record.pipeline_id),
                "tenant": record.tenant_id,
                "pipeline": record.pipeline_id,
                "operator": record.operator_id,
                "spans": record.count,
                "run_time_p50_ms": record.run_time_p50 * 1000,
                "run_time_p99_ms": record.run_time_p99 * 1000,
                "queue_wait_p99_ms": record.queue_wait_p99 * 1000,
                "deadline_miss_ratio": record.deadline_miss_ratio,
                "records_per_busy_s": record.true_processing_rate,
                "estimate_before_ms": before[(record.pipeline_id, record.operator_id)] * 1000,
                "estimate_after_ms": model.estimate(record.pipeline_id, record.operator_id) * 1000,
            }
            for record in records
        ]
        progress(
            f"stats job: {written} feedback records from the spans ({malformed} malformed spans skipped) "
            f"in {time.monotonic() - started:.0f} s"
        )
        return rows
    finally:
        consumer.close()
        spark.stop()


def _system_of(pipeline: str) -> str:
    """S1 names pipelines ``s1-<tenant>-<system>-<repetition>-<id>``: the system part, or the name."""
    parts = pipeline.split("-")
    return parts[2] if len(parts) >= 5 and parts[0] == "s1" else pipeline
