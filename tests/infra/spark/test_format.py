"""Choosing between Spark's native Kafka connector and cadenza-kafka (no jars on this machine)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from cadenza.errors import ConfigError
from cadenza.infra.spark import SparkUnavailableError, datasource, kafka_format, native_kafka_available
from cadenza.infra.spark.datasource import FORMAT_CONF


@pytest.fixture
def format_conf(spark: SparkSession) -> Iterator[None]:
    yield
    spark.conf.unset(FORMAT_CONF)


def test_without_the_jars_the_cadenza_source_is_chosen_and_usable(spark: SparkSession) -> None:
    assert not native_kafka_available(spark)
    fmt = kafka_format(spark)
    assert fmt == "cadenza-kafka"
    df = spark.readStream.format(fmt).option("subscribe", "t").load()
    assert df.columns == [
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
        "headers",
    ]


def test_forcing_the_native_connector_without_its_jars_says_how_to_add_them(spark: SparkSession) -> None:
    with pytest.raises(
        SparkUnavailableError, match=r"--packages org\.apache\.spark:spark-sql-kafka-0-10_2\.13"
    ):
        kafka_format(spark, prefer="kafka")


def test_the_choice_can_come_from_spark_conf(spark: SparkSession, format_conf: None) -> None:
    spark.conf.set(FORMAT_CONF, "cadenza-kafka")
    assert kafka_format(spark) == "cadenza-kafka"
    spark.conf.set(FORMAT_CONF, "kafka")
    with pytest.raises(SparkUnavailableError):
        kafka_format(spark)
    spark.conf.set(FORMAT_CONF, "kafak")
    with pytest.raises(
        ConfigError, match=r"spark\.cadenza\.kafka\.format must be auto, kafka or cadenza-kafka"
    ):
        kafka_format(spark)


def test_a_loadable_class_is_detected(spark: SparkSession) -> None:
    """The detection itself works: a class that is on the classpath is found by the same lookup."""
    assert datasource._class_loadable(spark, "org.apache.spark.sql.SparkSession")
    assert not datasource._class_loadable(spark, datasource.NATIVE_PROVIDER)
