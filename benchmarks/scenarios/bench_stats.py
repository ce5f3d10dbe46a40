"""The stats job's speed: feedback delay and sustained spans/s, on local Spark against a real broker.

(i) **Feedback delay**: the stats job runs continuously (update mode, ``--trigger``); a probe span
for a fresh operator is produced with ``emitted_at`` = now, and the clock stops when a
FeedbackConsumer, applying into a CostModel as a worker does, has moved that operator's estimate.
(ii) **Sustained spans/s**: ``--spans`` spans are produced first, then the job reads them in
micro-batches of ``--batch`` spans; reported are the whole run's spans per second (JVM start
excluded, first batch included) and the median of the per-batch processing rates Spark reports.

    .venv/bin/python benchmarks/scenarios/bench_stats.py --out benchmarks/results

Uses CADENZA_TEST_BOOTSTRAP if set, else the embedded broker.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from _common import environment, write_result

from cadenza.feedback.consumer import FeedbackConsumer
from cadenza.feedback.stats_job import StatsConfig, start_stats
from cadenza.infra.kafka.clients import flush_or_raise, make_admin, make_producer
from cadenza.infra.kafka.topics import TopicSpec, ensure_topics
from cadenza.infra.metrics.spans import SPAN_CODEC, Span, encode_span, span_key
from cadenza.infra.spark import register, spark_session
from cadenza.scheduling.costs import CostModel
from cadenza.settings import KafkaSettings
from cadenza.testing.brokers import provide_test_broker

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def span(operator: str, at: float, index: int) -> Span:
    return Span(
        "bench",
        "t",
        operator,
        "w1",
        index % 4,
        index,
        0.001,
        0.002 + (index % 7) * 1e-4,
        None,
        at + 1,
        None,
        at,
        1.0,
    )


def produce(settings: KafkaSettings, topic: str, spans: list[Span]) -> None:
    producer, errors = make_producer(settings, **{"linger.ms": 20})
    headers: list[tuple[str, str | bytes | None]] = [*SPAN_CODEC.headers()]
    for item in spans:
        while True:
            try:
                producer.produce(topic, encode_span(item), span_key(item.trace_id), headers=headers)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    flush_or_raise(producer, None, timeout=60)
    errors.raise_fatal()


def bench_throughput(
    spark: SparkSession, settings: KafkaSettings, count: int, batch: int, workdir: Path
) -> dict[str, object]:
    run = uuid.uuid4().hex[:6]
    metrics, feedback = f"bench-spans-{run}", f"bench-feedback-{run}"
    ensure_topics(make_admin(settings), [TopicSpec(metrics, partitions=4), TopicSpec(feedback, partitions=1)])
    now = time.time()
    produce(settings, metrics, [span(f"op{i % 8}", now - 60 + 60 * i / count, i) for i in range(count)])
    config = StatsConfig(
        metrics_topic=metrics,
        feedback_topic=feedback,
        window="20 seconds",
        slide="10 seconds",
        watermark="2 minutes",
        trigger="availableNow",
        checkpoint=workdir / "throughput",
        starting_offsets="earliest",
        max_records_per_trigger=batch,
    )
    started = time.perf_counter()
    job = start_stats(spark, settings, config)
    job.query.awaitTermination()
    elapsed = time.perf_counter() - started
    rates = [p["processedRowsPerSecond"] for p in job.query.recentProgress if p["numInputRows"] > 0]
    return {
        "spans": count,
        "batch": batch,
        "seconds": round(elapsed, 2),
        "spans_per_s_overall": round(count / elapsed),
        "spans_per_s_batch_median": round(statistics.median(rates)) if rates else None,
        "batches": len(rates),
        "feedback_records": job.written,
        "malformed": job.malformed,
    }


def bench_delay(
    spark: SparkSession, settings: KafkaSettings, probes: int, trigger: str, workdir: Path
) -> dict[str, object]:
    run = uuid.uuid4().hex[:6]
    metrics, feedback = f"bench-spans-{run}", f"bench-feedback-{run}"
    ensure_topics(make_admin(settings), [TopicSpec(metrics, partitions=4), TopicSpec(feedback, partitions=1)])
    config = StatsConfig(
        metrics_topic=metrics,
        feedback_topic=feedback,
        window="10 seconds",
        slide="5 seconds",
        watermark="10 seconds",
        trigger=trigger,
        checkpoint=workdir / "delay",
        starting_offsets="earliest",
    )
    job = start_stats(spark, settings, config)
    consumer = FeedbackConsumer(settings, feedback)
    consumer.start()
    model = CostModel()
    delays: list[float] = []
    try:
        produce(settings, metrics, [span("warmup", time.time(), 0)])  # first batch pays Python worker start
        deadline = time.monotonic() + 120
        while consumer.received == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        for probe in range(probes):
            operator = f"probe-{probe}"
            sent = time.time()
            produce(settings, metrics, [span(operator, sent, probe + 1)])
            while time.time() - sent < 60:
                consumer.apply_pending(model)
                if model.estimate("bench", operator) != model.default_cost:
                    delays.append(time.time() - sent)
                    break
                time.sleep(0.01)
            time.sleep(0.5)
    finally:
        consumer.close()
        job.stop()
    return {
        "trigger": trigger,
        "probes": probes,
        "seen": len(delays),
        "delay_s_median": round(statistics.median(delays), 3) if delays else None,
        "delay_s_max": round(max(delays), 3) if delays else None,
        "delays_s": [round(d, 3) for d in delays],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, help="directory for stats.json")
    parser.add_argument("--spans", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=50_000)
    parser.add_argument("--probes", type=int, default=8)
    parser.add_argument("--trigger", default="1 second")
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    with provide_test_broker() as broker, tempfile.TemporaryDirectory() as tmp:
        spark = spark_session("cadenza-bench-stats", ui=False, config={"spark.sql.session.timeZone": "UTC"})
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)
        try:
            result: dict[str, object] = {
                **environment(),
                "broker": broker.kind,
                "throughput": bench_throughput(spark, broker.settings, args.spans, args.batch, Path(tmp)),
                "feedback_delay": bench_delay(spark, broker.settings, args.probes, args.trigger, Path(tmp)),
            }
        finally:
            spark.stop()
    print(f"stats job throughput: {result['throughput']}")
    print(f"feedback delay: {result['feedback_delay']}")
    if args.out is not None:
        write_result(args.out, "stats.json", result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
