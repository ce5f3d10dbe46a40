"""Running cadenza-kafka streaming queries in tests and turning their rows into comparable records."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, Row, SparkSession

from cadenza.settings import KafkaSettings
from tests.infra.spark.kafka_helpers import Record

QUERY_TIMEOUT = 120


def read_stream(spark: SparkSession, settings: KafkaSettings, **options: str) -> DataFrame:
    reader = spark.readStream.format("cadenza-kafka").option(
        "kafka.bootstrap.servers", settings.bootstrap_servers
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def to_record(row: Row) -> Record:
    return Record(
        row.topic,
        row.partition,
        row.offset,
        None if row.key is None else bytes(row.key),
        None if row.value is None else bytes(row.value),
        tuple((h.key, None if h.value is None else bytes(h.value)) for h in row.headers or ()),
    )


class InjectedFailureError(RuntimeError):
    """Raised inside foreachBatch to kill a query after it has seen a batch."""


@dataclass
class Batches:
    """What foreachBatch saw, batch by batch (including a batch whose processing then failed)."""

    seen: list[tuple[int, list[Row]]] = field(default_factory=list)

    def records(self) -> list[Record]:
        return sorted(to_record(row) for _, rows in self.seen for row in rows)

    def non_empty(self) -> list[tuple[int, list[Row]]]:
        return [(batch_id, rows) for batch_id, rows in self.seen if rows]


def run_available_now(
    df: DataFrame, checkpoint: Path, *, fail_in_batch: int | None = None, batches: Batches | None = None
) -> Batches:
    """Run ``df`` up to the data present now; collect every micro-batch on the driver.

    ``fail_in_batch`` makes the query fail right after collecting that batch, before Spark marks it
    done, as a crash in the middle of a batch would; pass ``batches`` to keep what it saw.
    """
    batches = Batches() if batches is None else batches

    def each(batch: DataFrame, batch_id: int) -> None:
        batches.seen.append((batch_id, batch.collect()))
        if batch_id == fail_in_batch:
            raise InjectedFailureError(f"injected failure in batch {batch_id}")

    query = (
        df.writeStream.foreachBatch(each)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    finished = query.awaitTermination(QUERY_TIMEOUT)
    if not finished:
        query.stop()
        raise AssertionError(f"query did not finish within {QUERY_TIMEOUT}s")
    return batches


def start_and_wait(writer: Any) -> None:
    """Start a DataStreamWriter and wait for its availableNow run to end (raising its failure)."""
    query = writer.trigger(availableNow=True).start()
    if not query.awaitTermination(QUERY_TIMEOUT):
        query.stop()
        raise AssertionError(f"query did not finish within {QUERY_TIMEOUT}s")
