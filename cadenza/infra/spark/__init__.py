"""Spark Structured Streaming for cadenza: a local session with clear failures, and Kafka without jars.

``spark_session`` and ``SparkUnavailableError`` import without PySpark, so a missing install is
reported by cadenza ("pip install 'cadenza[spark]'") rather than by an ImportError; the data source
names load PySpark on first use.

    from cadenza.infra.spark import kafka_format, kafka_options, spark_session
    from cadenza.settings import KafkaSettings

    spark = spark_session("clicks")
    fmt = kafka_format(spark)  # "kafka" with the native jars, else "cadenza-kafka" (registered)
    connection = kafka_options(KafkaSettings.load(), fmt)  # CADENZA_* settings as kafka.* options
    clicks = spark.readStream.format(fmt).options(**connection).option("subscribe", "clicks").load()
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from cadenza.infra.spark.session import SparkUnavailableError, find_java, require_pyspark, spark_session

if TYPE_CHECKING:
    from cadenza.infra.spark.datasource import (
        CadenzaKafkaDataSource,
        kafka_format,
        kafka_options,
        native_kafka_available,
        register,
    )

_LAZY = {
    "CadenzaKafkaDataSource": "cadenza.infra.spark.datasource",
    "kafka_format": "cadenza.infra.spark.datasource",
    "kafka_options": "cadenza.infra.spark.datasource",
    "native_kafka_available": "cadenza.infra.spark.datasource",
    "register": "cadenza.infra.spark.datasource",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    require_pyspark()
    return getattr(importlib.import_module(module), name)


__all__ = [
    "CadenzaKafkaDataSource",
    "SparkUnavailableError",
    "find_java",
    "kafka_format",
    "kafka_options",
    "native_kafka_available",
    "register",
    "require_pyspark",
    "spark_session",
]
