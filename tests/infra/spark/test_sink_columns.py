"""The sink's column contract, checked on the driver before any record is produced (no Spark, no broker)."""

from __future__ import annotations

import pytest
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from cadenza.errors import ConfigError
from cadenza.infra.spark.kafka_sink import SinkColumns, sink_columns
from cadenza.infra.spark.options import SinkOptions, parse_sink_options

WITH_TOPIC = parse_sink_options({"topic": "out"})
NO_TOPIC = parse_sink_options({})
HEADERS = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))


def schema(**columns: DataType) -> StructType:
    return StructType([StructField(name, data_type) for name, data_type in columns.items()])


def test_all_columns_in_any_order_and_case() -> None:
    columns = schema(
        Partition=IntegerType(),
        extra=DoubleType(),
        headers=HEADERS,
        VALUE=BinaryType(),
        topic=StringType(),
        key=StringType(),
    )
    assert sink_columns(columns, NO_TOPIC) == SinkColumns(value=3, key=5, topic=4, partition=0, headers=2)


def test_the_topic_option_wins_over_a_topic_column() -> None:
    assert sink_columns(schema(value=StringType(), topic=StringType()), WITH_TOPIC).topic is None


@pytest.mark.parametrize(
    ("columns", "options", "message"),
    [
        (
            schema(body=StringType()),
            WITH_TOPIC,
            "needs a value column (string or binary); the input has body",
        ),
        (schema(value=LongType()), WITH_TOPIC, "column value must be string or binary, but it is bigint"),
        (
            schema(value=StringType(), key=IntegerType()),
            WITH_TOPIC,
            "column key must be string or binary, but it is int",
        ),
        (
            schema(value=StringType()),
            NO_TOPIC,
            "needs a topic: set option topic or add a string column topic",
        ),
        (
            schema(value=StringType(), topic=IntegerType()),
            NO_TOPIC,
            "column topic must be a string, but it is int",
        ),
        (
            schema(value=StringType(), partition=LongType()),
            WITH_TOPIC,
            "column partition must be an int, but it is bigint",
        ),
        (
            schema(value=StringType(), headers=ArrayType(StringType())),
            WITH_TOPIC,
            "column headers must be array<struct<key:string,value:binary>>, but it is array<string>",
        ),
    ],
)
def test_unusable_columns_are_named_with_the_fix(
    columns: StructType, options: SinkOptions, message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        sink_columns(columns, options)
    assert message in str(caught.value)
