"""Running a pipeline's ``on_spark`` stages as Structured Streaming queries.

A stage reads the stage-input topic the worker's JSON sink writes, parses the values with a Spark
schema derived from the stage's input model, gives the user's transform a DataFrame with those
columns plus an event-time column (with the stage's watermark) and the scheduling context of each
record, and writes the transform's rows as JSON to the result topic, each with a ``cadenza-ctx``
header: the pipeline's tenant and latency target, a frontier time (the window's end for windowed
results, else the input's frontier when the row kept it) and the input's hop count + 1. That header
is what keeps the deadlines of the steps downstream of the stage honest.

Records whose value is not JSON of the input model go to the pipeline's dead-letter topic (the record
unchanged plus ``cadenza-error`` headers) from a second, stateless query on the same input, and are
counted; the stage query itself never sees them.
"""

from __future__ import annotations

import datetime as dt
import decimal
import enum
import logging
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 - the PySpark convention
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DateType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from cadenza.errors import ConfigError
from cadenza.infra.spark.datasource import kafka_format, kafka_options
from cadenza.infra.spark.publish import PublishingQuery, batch_publisher
from cadenza.pipelines.graph import PipelineGraph, SparkStageFunctions, SparkStageSpec
from cadenza.scheduling.context import (
    CONTEXT_HEADER,
    SchedulingContext,
    decode_context,
    encode_context,
    new_trace_id,
)
from cadenza.schemas import ERROR_HEADER, ERROR_TYPE_HEADER
from cadenza.settings import KafkaSettings

if TYPE_CHECKING:
    from pyspark.accumulators import Accumulator
    from pyspark.sql.streaming.query import StreamingQuery

__all__ = [
    "CONTEXT_COLUMNS",
    "StageQuery",
    "incoming_context",
    "model_schema",
    "outgoing_context",
    "stage_input",
    "stage_output",
    "start_stage",
]

_log = logging.getLogger("cadenza.spark.stages")

#: Columns the stage adds next to the parsed value; none of them goes into the result's JSON.
CONTEXT_COLUMNS = ("_key", "_frontier_time", "_hops", "_trace_id")
EVENT_TIME = "event_time"
_CORRUPT = "_corrupt_record"
_SIGN = 1 << 63
_WRAP = 1 << 64

_SCALARS: dict[object, DataType] = {
    str: StringType(),
    int: LongType(),
    float: DoubleType(),
    bool: BooleanType(),
    dt.datetime: TimestampType(),
    dt.date: DateType(),
    decimal.Decimal: DoubleType(),
    bytes: StringType(),  # JSON carries bytes as base64 text
}


def model_schema(model: type[BaseModel]) -> StructType:
    """The Spark schema of ``model``'s JSON form; ConfigError names a field Spark cannot hold."""
    return StructType(
        [
            StructField(name, _spark_type(field.annotation, f"{model.__name__}.{name}"), nullable=True)
            for name, field in model.model_fields.items()
        ]
    )


def _spark_type(annotation: Any, where: str) -> DataType:
    if annotation in _SCALARS:
        return _SCALARS[annotation]
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return model_schema(annotation)
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        kinds = {type(member.value) for member in annotation}
        return LongType() if kinds == {int} else StringType()
    origin = typing.get_origin(annotation)
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if origin in (typing.Union, types.UnionType) and len(args) == 1:
        return _spark_type(args[0], where)
    if origin is typing.Literal:
        return LongType() if all(isinstance(a, int) for a in args) else StringType()
    if origin is typing.Annotated:
        return _spark_type(args[0], where)
    if origin in (list, tuple, set, frozenset, Sequence) and args:
        if origin is tuple and len(set(args) - {Ellipsis}) != 1:
            raise ConfigError(f"{where}: tuples of mixed types cannot be a Spark column; use a model")
        return ArrayType(_spark_type(args[0], where))
    if origin in (dict, Mapping) and len(args) == 2 and args[0] is str:
        return MapType(StringType(), _spark_type(args[1], where))
    raise ConfigError(
        f"{where}: type {annotation!r} has no Spark column type; use str, int, float, bool, datetime, "
        "date, a nested model, or a list/dict/Optional of those"
    )


# -- contexts ---------------------------------------------------------------------------------------

_INCOMING = StructType(
    [
        StructField("frontier", DoubleType()),
        StructField("hops", IntegerType()),
        StructField("trace", LongType()),
    ]
)


def incoming_context(headers: list[Any] | None, timestamp: dt.datetime | None) -> tuple[float, int, int]:
    """``(t_F, hops, signed trace id)`` of a stage-input record from its ``cadenza-ctx`` header.

    A missing or garbled header gives a fresh context, as a worker does at a source: the record's
    Kafka time as frontier, no hops, a new trace.
    """
    ctx: SchedulingContext | None = None
    for header in headers or ():
        if header[0] == CONTEXT_HEADER:
            ctx = decode_context(header[1])
    if ctx is None:
        frontier = timestamp.timestamp() if timestamp is not None else dt.datetime.now(dt.UTC).timestamp()
        return frontier, 0, _signed(new_trace_id())
    return ctx.frontier_time, ctx.hops, _signed(ctx.trace_id)


def outgoing_context(stage: SparkStageSpec, frontier: float, hops: int, trace: int | None) -> bytes:
    """The ``cadenza-ctx`` header value of one result record; priority is the deadline ``t_F + L``."""
    return encode_context(
        SchedulingContext(
            pipeline_id=stage.pipeline,
            tenant_id=stage.tenant,
            frontier_time=frontier,
            latency_target=stage.latency_target_s,
            priority=frontier + stage.latency_target_s,
            path_cost=0.0,
            hops=max(0, hops),
            trace_id=new_trace_id() if trace is None else trace & (_WRAP - 1),
        )
    )


def _signed(trace: int) -> int:
    return trace - _WRAP if trace >= _SIGN else trace


# -- the query --------------------------------------------------------------------------------------


def _event_time(stage: SparkStageSpec, schema: StructType) -> Column:
    field = stage.event_time_field
    if field is None and EVENT_TIME in schema.fieldNames():
        field = EVENT_TIME
    if field is None:
        return F.col("timestamp")
    column = F.col(f"parsed.{field}")
    kind = schema[field].dataType
    if isinstance(kind, TimestampType):
        return column
    if isinstance(kind, LongType | DoubleType):  # epoch seconds, as cadenza's event times are
        return F.timestamp_micros((column * F.lit(1_000_000)).cast("long"))
    return column.cast("timestamp")


def _parsed(raw: DataFrame, schema: StructType) -> DataFrame:
    with_corrupt = StructType([*schema.fields, StructField(_CORRUPT, StringType())])
    text = F.col("value").cast("string")
    return raw.withColumn(
        "parsed",
        F.from_json(text, with_corrupt, {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": _CORRUPT}),
    ).withColumn(
        "_bad", F.col("value").isNull() | F.col("parsed").isNull() | F.col(f"parsed.{_CORRUPT}").isNotNull()
    )


def stage_input(raw: DataFrame, stage: SparkStageSpec, functions: SparkStageFunctions) -> DataFrame:
    """The DataFrame the transform gets: value columns, ``event_time`` (watermarked) and context columns."""
    if functions.input_model is None:
        raise ConfigError(f"Spark stage {stage.pipeline}/{stage.id} has no input model")
    schema = model_schema(functions.input_model)
    parsed = _parsed(raw, schema).where(~F.col("_bad"))
    context = F.udf(incoming_context, _INCOMING, useArrow=True)(F.col("headers"), F.col("timestamp"))
    columns = [F.col(f"parsed.{name}").alias(name) for name in schema.fieldNames()]
    if EVENT_TIME not in schema.fieldNames():
        columns.append(_event_time(stage, schema).alias(EVENT_TIME))
    frame = parsed.withColumn("_ctx", context).select(
        *columns,
        F.col("key").cast("string").alias("_key"),
        F.col("_ctx.frontier").alias("_frontier_time"),
        F.col("_ctx.hops").alias("_hops"),
        F.col("_ctx.trace").alias("_trace_id"),
    )
    if EVENT_TIME in schema.fieldNames():
        frame = frame.withColumn(EVENT_TIME, _event_time(stage, schema))
    if stage.watermark_s is not None:
        frame = frame.withWatermark(EVENT_TIME, f"{round(stage.watermark_s * 1000)} milliseconds")
    return frame


def stage_output(result: DataFrame, stage: SparkStageSpec) -> DataFrame:
    """The transform's rows as Kafka rows: JSON value, key from a ``key`` column, a ``cadenza-ctx`` header."""
    names = result.columns
    values = [name for name in names if name not in CONTEXT_COLUMNS]
    if not values:
        raise ConfigError(f"Spark stage {stage.pipeline}/{stage.id}: the transform returned no value column")
    window = result.schema[names.index("window")].dataType if "window" in names else None
    if isinstance(window, StructType) and "end" in window.fieldNames():
        frontier = F.unix_micros(F.col("window.end")) / F.lit(1e6)
    elif "_frontier_time" in names:
        frontier = F.col("_frontier_time").cast("double")
    else:
        frontier = F.unix_micros(F.current_timestamp()) / F.lit(1e6)
    hops = F.col("_hops") + F.lit(1) if "_hops" in names else F.lit(stage.hops + 1)
    trace = F.col("_trace_id") if "_trace_id" in names else F.lit(None).cast("long")
    key = (
        F.col("key").cast("string")
        if "key" in names
        else F.col("_key")
        if "_key" in names
        else F.lit(None).cast("string")
    )

    def header(frontier: float, hops: int, trace: int | None) -> bytes:
        return outgoing_context(stage, frontier, hops, trace)

    ctx = F.udf(header, BinaryType(), useArrow=True)(frontier, hops.cast("int"), trace)
    return result.select(
        key.alias("key"),
        F.to_json(F.struct(*values)).alias("value"),
        F.array(F.struct(F.lit(CONTEXT_HEADER).alias("key"), ctx.alias("value"))).alias("headers"),
    )


def _dead_letters(raw: DataFrame, stage: SparkStageSpec, functions: SparkStageFunctions) -> DataFrame:
    assert functions.input_model is not None
    parsed = _parsed(raw, model_schema(functions.input_model)).where(F.col("_bad"))
    model = functions.input_model.__name__
    extra = F.array(
        F.struct(
            F.lit(ERROR_HEADER).alias("key"),
            F.lit(f"Spark stage {stage.id}: value is not JSON of {model}".encode()).alias("value"),
        ),
        F.struct(F.lit(ERROR_TYPE_HEADER).alias("key"), F.lit(b"DecodeError").alias("value")),
        F.struct(F.lit("cadenza-source-topic").alias("key"), F.col("topic").cast("binary").alias("value")),
        F.struct(
            F.lit("cadenza-source-offset").alias("key"),
            F.col("offset").cast("string").cast("binary").alias("value"),
        ),
    )
    none = F.array().cast("array<struct<key:string,value:binary>>")
    headers = F.concat(F.coalesce(F.col("headers"), none), extra)
    return parsed.select(
        "key", F.coalesce(F.col("value"), F.lit(b"")).alias("value"), headers.alias("headers")
    )


@dataclass
class StageQuery(PublishingQuery):
    """A running stage: its result query (``query``), the dead-letter query, and their counters."""

    stage: SparkStageSpec
    dead_letter_query: StreamingQuery
    dead_accumulator: Accumulator[int]

    @property
    def dead_letters(self) -> int:
        return int(self.dead_accumulator.value)

    def stop(self) -> None:
        super().stop()
        self.dead_letter_query.stop()

    def await_termination(self, timeout: float) -> bool:
        return bool(self.query.awaitTermination(round(timeout))) and bool(
            self.dead_letter_query.awaitTermination(round(timeout))
        )


def start_stage(
    spark: SparkSession,
    graph: PipelineGraph,
    stage_id: str,
    settings: KafkaSettings,
    *,
    checkpoint: Path,
    trigger: str = "1 second",
    starting_offsets: str = "earliest",
) -> StageQuery:
    """Start the stage's query (and its dead-letter query); ``trigger="availableNow"`` ends when caught up."""
    stage = graph.spark_stage(stage_id)
    functions = graph.spark_functions.get(stage_id)
    if functions is None:
        raise ConfigError(
            f"Spark stage {stage.pipeline}/{stage_id} has no transform: compile the pipeline from its "
            "module (a graph read back from JSON carries no code)"
        )
    fmt = kafka_format(spark)
    connection = kafka_options(settings, fmt)

    def read() -> DataFrame:
        reader = spark.readStream.format(fmt).options(**connection).option("subscribe", stage.input_topic)
        reader = reader.option("startingOffsets", starting_offsets)
        if fmt == "kafka":
            reader = reader.option("includeHeaders", "true")
        return reader.load()

    transform: Callable[[DataFrame], Any] = functions.transform
    result = transform(stage_input(read(), stage, functions))
    if not isinstance(result, DataFrame):
        raise ConfigError(
            f"Spark stage {stage.pipeline}/{stage_id}: transform {stage.transform} returned "
            f"{type(result).__name__}, not a DataFrame"
        )
    written = spark.sparkContext.accumulator(0)
    dead = spark.sparkContext.accumulator(0)
    name = f"cadenza-stage-{stage.pipeline}-{stage.id}"
    queries: list[StreamingQuery] = []
    for frame, topic, counter, suffix in (
        (stage_output(result, stage), stage.output_topic, written, "result"),
        (_dead_letters(read(), stage, functions), graph.dead_letter_topic, dead, "dead-letters"),
    ):
        writer = (
            frame.writeStream.foreachBatch(batch_publisher(fmt, connection, topic, counter, name))
            .outputMode(stage.output_mode if suffix == "result" else "append")
            .option("checkpointLocation", str(checkpoint / suffix))
            .queryName(f"{name}-{suffix}")
        )
        writer = (
            writer.trigger(availableNow=True)
            if trigger == "availableNow"
            else writer.trigger(processingTime=trigger)
        )
        queries.append(writer.start())
    _log.info("Spark stage %s/%s: %s -> %s", stage.pipeline, stage.id, stage.input_topic, stage.output_topic)
    return StageQuery(
        query=queries[0],
        written_accumulator=written,
        stage=stage,
        dead_letter_query=queries[1],
        dead_accumulator=dead,
    )
