"""What ``cadenza stats`` and ``cadenza spark-stage`` share: a Spark session with one clear failure,
and a progress loop that stops the queries cleanly on Ctrl-C or SIGTERM."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated

import typer
from rich.live import Live
from rich.table import Table

from cadenza.cli.console import console
from cadenza.cli.stop_signals import stop_on_signals

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery


#: Where ``--kafka-format`` is read from when the option is not given.
KAFKA_FORMAT_ENV = "CADENZA_SPARK_KAFKA_FORMAT"
#: The Spark conf key ``kafka_format()`` reads (``cadenza.infra.spark.datasource.FORMAT_CONF``; not
#: imported from there because that module needs PySpark and the CLI must load without it).
FORMAT_CONF = "spark.cadenza.kafka.format"
_NATIVE_ARTIFACT = "org.apache.spark:spark-sql-kafka-0-10_2.13"


class KafkaFormat(StrEnum):
    """``--kafka-format``: Spark's native Kafka connector, cadenza's data source, or whichever loads."""

    AUTO = "auto"
    KAFKA = "kafka"
    CADENZA_KAFKA = "cadenza-kafka"


KAFKA_FORMAT_HELP = (
    "Kafka connector: kafka (Spark's native one; add its jars with --spark-conf "
    f"spark.jars.packages={_NATIVE_ARTIFACT}:<Spark version>), cadenza-kafka (no jars), "
    "or auto (kafka if its jars load, else cadenza-kafka)."
)
SPARK_CONF_HELP = "Extra Spark configuration (repeatable), e.g. spark.driver.memory=2g."


def parse_spark_conf(values: Sequence[str] | None) -> dict[str, str]:
    """``["KEY=VALUE", ...]`` as a dict; typer.BadParameter (a usage error) names a malformed entry."""
    config: dict[str, str] = {}
    for entry in values or ():
        key, sep, value = entry.partition("=")
        key = key.strip()
        if not sep or not key:
            raise typer.BadParameter(f"{entry!r} is not KEY=VALUE", param_hint="--spark-conf")
        if not key.startswith("spark.") or any(c.isspace() for c in key):
            raise typer.BadParameter(
                f"{key!r} is not a Spark configuration key (they start with 'spark.' and have no spaces)",
                param_hint="--spark-conf",
            )
        if key == FORMAT_CONF:
            raise typer.BadParameter(
                f"set {FORMAT_CONF} with --kafka-format (or {KAFKA_FORMAT_ENV})", param_hint="--spark-conf"
            )
        config[key] = value
    return config


def check_spark_conf(values: list[str] | None) -> list[str] | None:
    """Typer callback: reject a malformed ``--spark-conf`` before anything starts."""
    parse_spark_conf(values)
    return values


KafkaFormatOption = Annotated[KafkaFormat, typer.Option(envvar=KAFKA_FORMAT_ENV, help=KAFKA_FORMAT_HELP)]
"""``--kafka-format``, as ``cadenza stats`` and ``cadenza spark-stage`` both take it."""
SparkConfOption = Annotated[
    list[str] | None,
    typer.Option("--spark-conf", metavar="KEY=VALUE", callback=check_spark_conf, help=SPARK_CONF_HELP),
]
"""``--spark-conf KEY=VALUE`` (repeatable), checked before anything starts."""


def start_spark(
    app_name: str,
    master: str,
    *,
    kafka_format: KafkaFormat | str = KafkaFormat.AUTO,
    spark_conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """A session (raising SparkUnavailableError with cause and fix: no PySpark, no or old Java, no JVM).

    ``spark_conf`` is added to the session's configuration (after cadenza's defaults, so it wins);
    ``kafka_format`` is set as ``spark.cadenza.kafka.format``, which the stats job and the Spark
    stages read through ``kafka_format(spark)``, and checked at once: "kafka" without the native
    connector's jars fails here, naming the ``--spark-conf`` that adds them.
    """
    from cadenza.infra.spark import register, spark_session  # noqa: PLC0415 - PySpark is optional

    choice = KafkaFormat(kafka_format)
    config = {"spark.sql.session.timeZone": "UTC", **(spark_conf or {}), FORMAT_CONF: choice.value}
    session = spark_session(app_name, master=master, config=config)
    try:
        session.sparkContext.setLogLevel("ERROR")
        register(session)
        use_kafka_format(session, choice)
    except BaseException:
        session.stop()
        raise
    return session


def use_kafka_format(session: SparkSession, choice: KafkaFormat | str) -> str:
    """Make ``choice`` the session's Kafka format and return the format the queries will use.

    Raises SparkUnavailableError naming the fix when "kafka" is asked for and its jars do not load.
    """
    from cadenza.infra.spark import SparkUnavailableError, kafka_format  # noqa: PLC0415 - PySpark is optional

    choice = KafkaFormat(choice)
    session.conf.set(FORMAT_CONF, choice.value)
    try:
        return kafka_format(session)
    except SparkUnavailableError:
        if choice is not KafkaFormat.KAFKA:
            raise
        import pyspark  # noqa: PLC0415 - PySpark is optional

        raise SparkUnavailableError(
            "--kafka-format kafka: Spark's native Kafka connector is not on this session's classpath; "
            f"add it with --spark-conf spark.jars.packages={_NATIVE_ARTIFACT}:{pyspark.__version__} "
            "(downloaded from Maven Central at start), or use --kafka-format cadenza-kafka (no jars)"
        ) from None


def run_until_stopped(
    queries: Sequence[StreamingQuery], status: Callable[[], dict[str, str]], stop: Callable[[], None]
) -> None:
    """Show ``status()`` every second until a query ends or a signal arrives; then ``stop()``.

    A failed query's exception propagates (after the others are stopped), so the command exits non-zero.
    """
    try:
        with (
            stop_on_signals() as stopping,
            Live(_table(status()), console=console, refresh_per_second=2, transient=False) as live,
        ):
            while not stopping.is_set() and all(q.isActive for q in queries):
                stopping.wait(1.0)
                live.update(_table(status()))
    finally:
        stop()
    for query in queries:
        failure = query.exception()
        if failure is not None:
            raise RuntimeError(f"query {query.name} failed: {failure}")


def _table(status: dict[str, str]) -> Table:
    table = Table(show_header=False, box=None)
    for name, value in status.items():
        table.add_row(name, value)
    return table


def progress_line(query: StreamingQuery) -> str:
    """Batch, input rate and processing rate of the query's last micro-batch."""
    progress = query.lastProgress
    if not progress:
        return "starting"
    return (
        f"batch {progress.get('batchId')}: {progress.get('numInputRows', 0)} rows, "
        f"{progress.get('inputRowsPerSecond', 0.0):.0f} in/s, "
        f"{progress.get('processedRowsPerSecond', 0.0):.0f} processed/s"
    )
