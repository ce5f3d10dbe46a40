"""What ``cadenza stats`` and ``cadenza spark-stage`` share: a Spark session with one clear failure,
and a progress loop that stops the queries cleanly on Ctrl-C or SIGTERM."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Sequence
from types import FrameType
from typing import TYPE_CHECKING

from rich.live import Live
from rich.table import Table

from cadenza.cli.console import console

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery


def start_spark(app_name: str, master: str) -> SparkSession:
    """A session (raising SparkUnavailableError with cause and fix: no PySpark, no or old Java, no JVM)."""
    from cadenza.infra.spark import register, spark_session  # noqa: PLC0415 - PySpark is optional

    session = spark_session(app_name, master=master, config={"spark.sql.session.timeZone": "UTC"})
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    return session


def run_until_stopped(
    queries: Sequence[StreamingQuery], status: Callable[[], dict[str, str]], stop: Callable[[], None]
) -> None:
    """Show ``status()`` every second until a query ends or a signal arrives; then ``stop()``.

    A failed query's exception propagates (after the others are stopped), so the command exits non-zero.
    """
    stopping = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        stopping.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        with Live(_table(status()), console=console, refresh_per_second=2, transient=False) as live:
            while not stopping.is_set() and all(q.isActive for q in queries):
                stopping.wait(1.0)
                live.update(_table(status()))
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
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
