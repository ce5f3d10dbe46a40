"""Option mistakes fail at ``load()``, in Spark, with cadenza's message (no broker needed)."""

from __future__ import annotations

import pytest
from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession

from cadenza.infra.spark.kafka_source import source_schema


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "cadenza-kafka needs the topics to read: option subscribe"),
        (
            {"subscribe": "a", "subscribePattern": "b.*"},
            "give either subscribe or subscribePattern, not both",
        ),
        (
            {"subscribe": "a", "startingOffsets": "{not json"},
            "startingOffsets must be earliest, latest or JSON",
        ),
        (
            {"subscribe": "a", "kafka.bootstrap.servers": "nohost"},
            "kafka.bootstrap.servers (or CADENZA_BOOTSTRAP_SERVERS)",
        ),
    ],
)
def test_bad_options_fail_at_load_with_a_clear_message(
    spark: SparkSession, options: dict[str, str], message: str
) -> None:
    reader = spark.readStream.format("cadenza-kafka")
    for key, value in options.items():
        reader = reader.option(key, value)
    with pytest.raises(AnalysisException) as caught:
        reader.load()
    assert message in str(caught.value)


def test_include_headers_false_drops_the_column(spark: SparkSession) -> None:
    df = (
        spark.readStream.format("cadenza-kafka")
        .option("subscribe", "any")
        .option("includeHeaders", "false")
        .load()
    )
    assert df.schema == source_schema(include_headers=False)
    assert "headers" not in df.columns
