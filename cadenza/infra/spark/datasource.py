"""The ``cadenza-kafka`` Python data source, its registration, and the choice against the native one.

Spark's own Kafka connector lives in jars fetched from Maven, which many machines (air-gapped CI,
this project's own) cannot reach. The Python Data Source API of PySpark 4 lets the same
``readStream.format(...)`` / ``writeStream.format(...)`` contract be served by confluent-kafka
instead. Where the native jars *are* on the classpath they are faster (JVM, no Python workers), so
:func:`kafka_format` picks them unless told otherwise.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from cadenza.errors import ConfigError
from cadenza.infra.spark.kafka_sink import KafkaBatchWriter, KafkaStreamWriter, sink_columns
from cadenza.infra.spark.kafka_source import KafkaStreamReader, source_schema
from cadenza.infra.spark.options import FORMAT_NAME, parse_sink_options, parse_source_options
from cadenza.infra.spark.session import SparkUnavailableError
from cadenza.settings import KafkaSettings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: The class Spark's native connector registers the "kafka" format with.
NATIVE_PROVIDER = "org.apache.spark.sql.kafka010.KafkaSourceProvider"
#: Spark conf choosing the format: "auto" (native if loadable), "kafka" or "cadenza-kafka".
FORMAT_CONF = "spark.cadenza.kafka.format"
NATIVE_PACKAGE_HINT = (
    "start Spark with --packages org.apache.spark:spark-sql-kafka-0-10_2.13:<your Spark version> "
    "(or spark.jars.packages), or use the cadenza-kafka format"
)

FormatChoice = Literal["auto", "kafka", "cadenza-kafka"]


class CadenzaKafkaDataSource(DataSource):
    """``format("cadenza-kafka")``: a Kafka streaming source and sink over confluent-kafka.

    Options are checked in :meth:`schema` as well as when the reader is built, so a mistake fails at
    ``load()`` instead of when the query has started. Spark's Python workers unpickle these classes
    by reference, so cadenza must be importable where they run: the same virtualenv locally
    (:func:`~cadenza.infra.spark.session.spark_session` points PYSPARK_PYTHON at it), the executor
    image or an installed wheel on a cluster.
    """

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def schema(self) -> StructType:
        options = parse_source_options(self.options)
        return source_schema(options.include_headers)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802 - PySpark API
        return KafkaStreamReader(parse_source_options(self.options))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:  # noqa: N802 - PySpark API
        # `overwrite` (complete output mode) cannot truncate a topic; like the native sink, append.
        options = parse_sink_options(self.options)
        return KafkaStreamWriter(options, sink_columns(schema, options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        options = parse_sink_options(self.options)
        return KafkaBatchWriter(options, sink_columns(schema, options))


def register(spark: SparkSession) -> None:
    """Make ``format("cadenza-kafka")`` available in ``spark`` (idempotent)."""
    spark.dataSource.register(CadenzaKafkaDataSource)


def native_kafka_available(spark: SparkSession) -> bool:
    """Whether Spark's own Kafka connector can be loaded by this session's JVM."""
    return _class_loadable(spark, NATIVE_PROVIDER)


def _class_loadable(spark: SparkSession, name: str) -> bool:
    """Ask the JVM, through the class loader Spark itself uses to find data sources (jars added with
    --packages/--jars live there, not on the system class path)."""
    jvm = getattr(spark, "_jvm", None)
    if jvm is None:  # Spark Connect: no local JVM to ask
        return False
    try:
        loader = jvm.org.apache.spark.util.Utils.getContextOrSparkClassLoader()
        jvm.java.lang.Class.forName(name, False, loader)
    except Exception:  # py4j's wrapper of ClassNotFoundException
        return False
    return True


def kafka_format(spark: SparkSession, prefer: FormatChoice | None = None) -> str:
    """The format to pass to ``readStream.format()``: "kafka" when its jars are loaded, else "cadenza-kafka".

    ``prefer`` (or the Spark conf ``spark.cadenza.kafka.format``) forces a choice; forcing "kafka"
    without the jars fails here, with the fix, rather than at query start with "data source not
    found". When "cadenza-kafka" is chosen it is registered in ``spark``, so the name works at once.
    """
    choice = prefer or spark.conf.get(FORMAT_CONF, "auto") or "auto"
    if choice not in ("auto", "kafka", FORMAT_NAME):
        raise ConfigError(f"{FORMAT_CONF} must be auto, kafka or {FORMAT_NAME}; got {choice!r}")
    native = choice != FORMAT_NAME and native_kafka_available(spark)
    if choice == "kafka" and not native:
        raise SparkUnavailableError(
            f"the native Kafka connector ({NATIVE_PROVIDER}) is not loaded: {NATIVE_PACKAGE_HINT}"
        )
    if native:
        return "kafka"
    register(spark)
    return FORMAT_NAME


_JAAS_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


def kafka_options(settings: KafkaSettings, fmt: str = FORMAT_NAME) -> dict[str, str]:
    """cadenza's connection settings as ``kafka.*`` options for ``fmt``, so one KafkaSettings serves both.

    The two connectors spell credentials differently: cadenza-kafka (librdkafka) takes a user name and
    password, the native one (the Java client) a JAAS line and a trust store. The result holds the
    password in clear text, as Spark needs it; Spark redacts option values named like passwords in
    its plans and UI.
    """
    if fmt == FORMAT_NAME:
        return {f"kafka.{key}": value for key, value in settings.client_config().items()}
    if fmt != "kafka":
        raise ConfigError(f"kafka_options: unknown format {fmt!r}; use kafka or {FORMAT_NAME}")
    options = {
        "kafka.bootstrap.servers": settings.bootstrap_servers,
        "kafka.client.id": settings.client_id,
        "kafka.security.protocol": settings.security_protocol.value,
    }
    if settings.sasl_mechanism is not None:
        mechanism = settings.sasl_mechanism.value
        options["kafka.sasl.mechanism"] = mechanism
        if mechanism in _JAAS_MODULES:
            user = _jaas_quote(settings.sasl_username or "")
            secret = _jaas_quote(settings.sasl_password.get_secret_value() if settings.sasl_password else "")
            options["kafka.sasl.jaas.config"] = (
                f"{_JAAS_MODULES[mechanism]} required username={user} password={secret};"
            )
    if settings.ssl_ca_location is not None:
        options["kafka.ssl.truststore.type"] = "PEM"
        options["kafka.ssl.truststore.location"] = str(settings.ssl_ca_location)
    if settings.ssl_certificate_location is not None:
        raise ConfigError(
            "kafka_options: client certificates (mTLS) cannot be translated for the native connector; "
            "give it kafka.ssl.keystore.* options yourself, or use the cadenza-kafka format"
        )
    return options


def _jaas_quote(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'
