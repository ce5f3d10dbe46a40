"""The latency-statistics job: spans from the metrics topic in, per-operator feedback records out.

One Structured Streaming query closes the scheduler's feedback loop: it reads the spans workers
write (``spans.avsc``, schemaless Avro), groups them per (pipeline, operator, tenant) over sliding
event-time windows of ``emitted_at``, and writes one ``feedback.avsc`` record per group and window to
the feedback topic, which every worker folds into its cost model.

What each statistic is, and why:

- ``count``: spans in the window, exact (sampled executions, as the schema says).
- ``p50/p95/p99`` of run time, queue wait and end-to-end latency: Spark's ``percentile_approx``
  (a Greenwald-Khanna quantile summary) with ``accuracy`` A (default 10,000). Its guarantee is on
  ranks: for ``n`` spans, the value returned for percentile ``p`` is a span value whose rank lies
  within ``n / A`` of ``p * n``; i.e. it lies between the exact ``(p - 1/A)`` and ``(p + 1/A)``
  quantiles. With the default and fewer than 10,000 spans per window that is less than one rank:
  the result is an actual span value at (or next to) the exact rank. Percentiles are of sampled
  spans, unweighted: sampling keeps whole traces uniformly at random, so the sampled values are an
  unbiased sample of the distribution as long as the workers feeding one window share a ratio.
- ``deadline_miss_ratio``: sink spans whose result missed its deadline over all sink spans, each
  weighted by ``1 / sample_ratio``, so workers sampling at different ratios count in proportion to
  the executions they stand for. Null when the window has no sink span.
- ``true_processing_rate`` (DS2): executions per busy second, ``sum(w) / sum(w * run_time_s)`` with
  ``w = 1 / sample_ratio``. ``inf`` when the window's busy time is zero (the feedback consumer
  treats that as unusable).

Malformed spans (undecodable, another schema's fingerprint, impossible values) are skipped and
counted in a Spark accumulator (:attr:`StatsQuery.malformed`); they never fail the query.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pandas as pd  # type: ignore[import-untyped]
import pyarrow as pa  # type: ignore[import-untyped]
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 - the PySpark convention
from pyspark.sql.pandas.functions import pandas_udf
from pyspark.sql.types import BinaryType

from cadenza.errors import ConfigError
from cadenza.feedback.records import FEEDBACK_CODEC, FeedbackRecord, encode_feedback
from cadenza.feedback.stats_decode import DECODED_SPAN_DDL, decode_span_batches
from cadenza.infra.metrics.topics import DEFAULT_FEEDBACK_TOPIC, DEFAULT_SPANS_TOPIC
from cadenza.infra.spark.datasource import kafka_format, kafka_options
from cadenza.infra.spark.publish import PublishingQuery, batch_publisher
from cadenza.schemas.codecs import SCHEMA_FP_HEADER
from cadenza.settings import KafkaSettings

if TYPE_CHECKING:
    from pyspark.accumulators import Accumulator

__all__ = ["DEFAULT_ACCURACY", "StatsConfig", "StatsQuery", "feedback_rows", "span_stats", "start_stats"]

_log = logging.getLogger("cadenza.spark.stats")

DEFAULT_ACCURACY = 10_000
"""``percentile_approx`` accuracy A: rank error at most n / A (see the module docstring)."""

OutputMode = Literal["update", "append"]

_PERCENTILES = [0.5, 0.95, 0.99]
_DURATIONS = (("run_time", "run_time_s"), ("queue_wait", "queue_wait_s"), ("e2e", "e2e_latency_s"))


@dataclass(frozen=True)
class StatsConfig:
    """The job's knobs; durations are Spark interval strings ("10 seconds") or seconds.

    ``output_mode="update"`` (the default) publishes a window's statistics at every trigger while
    the window is open, so feedback lags the spans by about one trigger interval; workers keep the
    newest ``(window_end, produced_at)`` per operator, so the updates supersede each other.
    ``"append"`` publishes each window once, final, after the watermark passes its end (window
    end + watermark later).
    """

    metrics_topic: str = DEFAULT_SPANS_TOPIC
    feedback_topic: str = DEFAULT_FEEDBACK_TOPIC
    window: str = "30 seconds"
    slide: str = "10 seconds"
    watermark: str = "30 seconds"
    trigger: str = "5 seconds"
    checkpoint: Path | None = None
    starting_offsets: str = "latest"
    max_records_per_trigger: int | None = None
    output_mode: OutputMode = "update"
    accuracy: int = DEFAULT_ACCURACY

    def __post_init__(self) -> None:
        if self.output_mode not in ("update", "append"):
            raise ConfigError(f"stats output mode must be update or append, got {self.output_mode!r}")
        if self.accuracy <= 0:
            raise ConfigError(f"percentile accuracy must be a positive integer, got {self.accuracy!r}")
        if self.metrics_topic == self.feedback_topic:
            raise ConfigError("the metrics and feedback topics must differ")


def decoded_spans(raw: DataFrame, malformed: Accumulator[int]) -> DataFrame:
    """Kafka rows of the metrics topic as decoded spans (good ones only; bad ones counted)."""
    columns = ["value", "headers"] if "headers" in raw.columns else ["value"]

    def decode(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return decode_span_batches(batches, malformed.add)

    return raw.select(*columns).mapInArrow(decode, DECODED_SPAN_DDL)


def span_stats(spans: DataFrame, config: StatsConfig) -> DataFrame:
    """Per (pipeline, operator, tenant) and sliding window: every statistic of ``feedback.avsc``."""
    weight = F.col("weight")
    sink = F.col("met").isNotNull()
    missed = F.sum(F.when(sink & ~F.col("met"), weight).otherwise(F.lit(0.0)))
    sinks = F.sum(F.when(sink, weight))
    busy = F.sum(weight * F.col("run_time_s"))
    aggregates: list[Column] = [F.count(F.lit(1)).alias("count")]
    for name, column in _DURATIONS:
        aggregates.append(
            F.percentile_approx(column, _PERCENTILES, config.accuracy).alias(f"{name}_percentiles")
        )
    aggregates += [
        F.when(sinks > 0, missed / sinks).alias("deadline_miss_ratio"),
        F.when(busy > 0, F.sum(weight) / busy).otherwise(F.lit(math.inf)).alias("true_processing_rate"),
    ]
    grouped = (
        spans.withWatermark("emitted_at", config.watermark)
        .groupBy(
            F.window("emitted_at", config.window, config.slide).alias("window"),
            "pipeline_id",
            "operator_id",
            "tenant_id",
        )
        .agg(*aggregates)
    )
    stats = grouped.select(
        "pipeline_id",
        "operator_id",
        "tenant_id",
        (F.unix_micros(F.col("window.start")) / 1e6).alias("window_start"),
        (F.unix_micros(F.col("window.end")) / 1e6).alias("window_end"),
        "count",
        *[
            F.col(f"{name}_percentiles")[index].alias(f"{name}_p{round(p * 100)}")
            for name, _ in _DURATIONS
            for index, p in enumerate(_PERCENTILES)
        ],
        "deadline_miss_ratio",
        "true_processing_rate",
        (F.unix_micros(F.current_timestamp()) / 1e6).alias("produced_at"),
    )
    return stats


#: The feedback record's fields in the order :func:`_encode` receives them.
_FEEDBACK_FIELDS = [
    "pipeline_id",
    "operator_id",
    "tenant_id",
    "window_start",
    "window_end",
    "count",
    "run_time_p50",
    "run_time_p95",
    "run_time_p99",
    "queue_wait_p50",
    "queue_wait_p95",
    "queue_wait_p99",
    "e2e_p50",
    "e2e_p95",
    "e2e_p99",
    "deadline_miss_ratio",
    "true_processing_rate",
    "produced_at",
]


def _optional(value: object) -> float | None:
    if value is None:
        return None
    number = float(value)  # type: ignore[arg-type]
    return None if math.isnan(number) else number


def encode_stats_frame(frame: pd.DataFrame) -> pd.Series:
    """Avro bodies (``encode_feedback``, the reference writer) for a pandas frame of statistics."""
    bodies: list[bytes] = []
    for row in frame.itertuples(index=False):
        record = FeedbackRecord(
            pipeline_id=row.pipeline_id,
            operator_id=row.operator_id,
            tenant_id=row.tenant_id,
            window_start=float(row.window_start),
            window_end=float(row.window_end),
            count=int(row.count),
            run_time_p50=float(row.run_time_p50),
            run_time_p95=float(row.run_time_p95),
            run_time_p99=float(row.run_time_p99),
            queue_wait_p50=float(row.queue_wait_p50),
            queue_wait_p95=float(row.queue_wait_p95),
            queue_wait_p99=float(row.queue_wait_p99),
            e2e_p50=_optional(row.e2e_p50),
            e2e_p95=_optional(row.e2e_p95),
            e2e_p99=_optional(row.e2e_p99),
            deadline_miss_ratio=_optional(row.deadline_miss_ratio),
            true_processing_rate=float(row.true_processing_rate),
            produced_at=float(row.produced_at),
        )
        bodies.append(encode_feedback(record))
    return pd.Series(bodies, dtype=object)


def _encode_udf(stats: pd.DataFrame) -> pd.Series:
    return encode_stats_frame(stats)


#: A vectorized (Arrow) UDF: a struct of statistics in, the Avro bodies out.
_encode: Any = pandas_udf(_encode_udf, BinaryType())  # type: ignore[call-overload]


def feedback_rows(stats: DataFrame) -> DataFrame:
    """Statistics as Kafka rows: key (pipeline, operator, tenant joined by NUL), Avro value, fp header."""
    key = F.concat_ws("\x00", "pipeline_id", "operator_id", "tenant_id").cast("binary")
    header = F.struct(F.lit(SCHEMA_FP_HEADER).alias("key"), F.lit(FEEDBACK_CODEC.fingerprint).alias("value"))
    return stats.select(
        key.alias("key"),
        _encode(F.struct(*_FEEDBACK_FIELDS)).alias("value"),
        F.array(header).alias("headers"),
    )


@dataclass
class StatsQuery(PublishingQuery):
    """A running stats job: the Spark query, the feedback records it published (``written``) and
    the count of malformed spans it skipped."""

    malformed_accumulator: Accumulator[int]
    config: StatsConfig

    @property
    def malformed(self) -> int:
        """Spans skipped so far (a re-run task may count its batch's bad spans again: at least)."""
        return int(self.malformed_accumulator.value)


def start_stats(spark: SparkSession, settings: KafkaSettings, config: StatsConfig) -> StatsQuery:
    """Start the job; ``config.trigger="availableNow"`` processes what is there and ends (tests, backfill)."""
    fmt = kafka_format(spark)
    connection = kafka_options(settings, fmt)
    reader = spark.readStream.format(fmt).options(**connection).option("subscribe", config.metrics_topic)
    reader = reader.option("startingOffsets", config.starting_offsets)
    if fmt == "kafka":
        reader = reader.option("includeHeaders", "true")
    if config.max_records_per_trigger is not None:
        option = "maxOffsetsPerTrigger" if fmt == "kafka" else "maxRecordsPerTrigger"
        reader = reader.option(option, str(config.max_records_per_trigger))
    malformed = spark.sparkContext.accumulator(0)
    written = spark.sparkContext.accumulator(0)
    rows = feedback_rows(span_stats(decoded_spans(reader.load(), malformed), config))

    writer = (
        rows.writeStream.foreachBatch(
            batch_publisher(fmt, connection, config.feedback_topic, written, "stats")
        )
        .outputMode(config.output_mode)
        .queryName(f"cadenza-stats-{config.metrics_topic}")
    )
    if config.checkpoint is not None:
        writer = writer.option("checkpointLocation", str(config.checkpoint))
    if config.trigger == "availableNow":
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=config.trigger)
    query = writer.start()
    _log.info(
        "stats job: %s -> %s, window %s sliding %s, watermark %s",
        config.metrics_topic,
        config.feedback_topic,
        config.window,
        config.slide,
        config.watermark,
    )
    return StatsQuery(
        query=query, malformed_accumulator=malformed, written_accumulator=written, config=config
    )
