"""What ``start_spark`` (behind ``cadenza stats`` and ``cadenza spark-stage``) does with the connector
and Spark options, on the shared session (no Kafka jars on this machine)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, cast

import pytest

from cadenza.cli import _spark_run
from cadenza.cli._spark_run import KafkaFormat, start_spark, use_kafka_format

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@pytest.fixture
def format_conf(spark: SparkSession) -> Iterator[None]:
    """The shared session's format setting is put back to auto for the tests after this one."""
    yield
    spark.conf.unset(_spark_run.FORMAT_CONF)


class Recorder:
    """The shared session as ``spark_session`` returns it, remembering the config and whether stopped."""

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark
        self.config: dict[str, str] | None = None
        self.stopped = False

    def spark_session(self, app_name: str, master: str, *, config: dict[str, str]) -> Recorder:
        self.config = dict(config)
        return self

    def stop(self) -> None:  # never the shared session itself
        self.stopped = True

    def __getattr__(self, name: str) -> Any:
        return getattr(self.spark, name)


def test_the_cli_sets_the_conf_key_the_jobs_read(spark: SparkSession) -> None:
    from cadenza.infra.spark import datasource  # noqa: PLC0415 - PySpark is optional for the CLI

    assert _spark_run.FORMAT_CONF == datasource.FORMAT_CONF


def test_start_spark_passes_the_options_into_the_session_and_the_jobs_format(
    spark: SparkSession, format_conf: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cadenza.infra.spark import kafka_format  # noqa: PLC0415 - PySpark is optional for the CLI

    recorder = Recorder(spark)
    monkeypatch.setattr("cadenza.infra.spark.spark_session", recorder.spark_session)
    session = start_spark(
        "cadenza-stats",
        "local[2]",
        kafka_format="cadenza-kafka",
        spark_conf={"spark.jars.packages": "g:a:1", "spark.sql.session.timeZone": "Europe/Paris"},
    )
    assert session is cast("SparkSession", recorder) and not recorder.stopped
    assert recorder.config == {
        "spark.sql.session.timeZone": "Europe/Paris",  # the user's conf wins over cadenza's default
        "spark.jars.packages": "g:a:1",
        "spark.cadenza.kafka.format": "cadenza-kafka",
    }
    # What stats_job.start_stats and stages.start_stage call to pick their format:
    assert kafka_format(spark) == "cadenza-kafka"


def test_asking_for_the_native_connector_without_its_jars_fails_at_start_naming_the_spark_conf(
    spark: SparkSession, format_conf: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pyspark  # noqa: PLC0415 - PySpark is optional for the CLI

    from cadenza.infra.spark import SparkUnavailableError  # noqa: PLC0415 - PySpark is optional

    recorder = Recorder(spark)
    monkeypatch.setattr("cadenza.infra.spark.spark_session", recorder.spark_session)
    fix = f"--spark-conf spark.jars.packages=org.apache.spark:spark-sql-kafka-0-10_2.13:{pyspark.__version__}"
    with pytest.raises(SparkUnavailableError, match=r"^--kafka-format kafka: ") as failure:
        start_spark("cadenza-stats", "local[2]", kafka_format=KafkaFormat.KAFKA)
    assert fix in str(failure.value)
    assert recorder.stopped  # the session is not left running behind the error


def test_auto_falls_back_to_the_python_source_without_the_jars(
    spark: SparkSession, format_conf: None
) -> None:
    assert use_kafka_format(spark, KafkaFormat.AUTO) == "cadenza-kafka"
    assert spark.conf.get(_spark_run.FORMAT_CONF) == "auto"
