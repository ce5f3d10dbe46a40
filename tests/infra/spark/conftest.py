"""One local SparkSession for every Spark test: a JVM start costs seconds, so it is paid once."""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

if importlib.util.find_spec("pyspark") is None:
    # Without the `spark` extra only the Java and install checks can run (they need no PySpark).
    collect_ignore_glob = [
        "test_format.py",
        "test_kafka_sink.py",
        "test_kafka_source.py",
        "test_options.py",
        "test_options_in_spark.py",
        "test_read_range.py",
        "test_sink_columns.py",
        "test_stats_job.py",
        "test_analysis_job.py",
        "test_spark_stage.py",
        "stage_pipelines.py",
        "span_data.py",
    ]


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    pytest.importorskip("pyspark", reason="PySpark is not installed (pip install 'cadenza[spark]')")
    from cadenza.infra.spark import register, spark_session  # noqa: PLC0415 - after the skip check

    # Spark's Python workers must import cadenza: run them on this interpreter (the venv's).
    os.environ["PYSPARK_PYTHON"] = sys.executable
    session = spark_session(
        "cadenza-tests",
        master="local[2]",
        shuffle_partitions=2,
        ui=False,
        config={"spark.sql.session.timeZone": "UTC"},
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()
