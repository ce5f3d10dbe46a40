"""Writing each micro-batch of a streaming query to a topic through the Kafka sink, in any output mode.

PySpark's Python data sources accept only appends from a streaming query, while statistics and
aggregations want ``update`` mode too (results while a window is open). A ``foreachBatch`` that
batch-writes every micro-batch through the same ``cadenza-kafka`` (or native) writer serves both
modes with the same delivery guarantee: at least once, a retried micro-batch may publish again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyspark.sql import DataFrame

if TYPE_CHECKING:
    from pyspark.accumulators import Accumulator
    from pyspark.sql.streaming.query import StreamingQuery

__all__ = ["PublishingQuery", "batch_publisher"]

_log = logging.getLogger("cadenza.spark")


def batch_publisher(
    fmt: str, connection: Mapping[str, str], topic: str, written: Accumulator[int], what: str
) -> Callable[[DataFrame, int], None]:
    """A ``foreachBatch`` function writing the batch's ``key``/``value``/``headers`` rows to ``topic``."""
    options = dict(connection)

    def publish(batch: DataFrame, batch_id: int) -> None:
        batch.persist()  # counted, then written: computed once
        try:
            count = batch.count()
            if count:
                batch.write.format(fmt).mode("append").options(**options).option("topic", topic).save()
            written.add(count)
            _log.debug("%s batch %d: %d record(s) to %s", what, batch_id, count, topic)
        finally:
            batch.unpersist()

    return publish


@dataclass
class PublishingQuery:
    """A running query whose micro-batches a :func:`batch_publisher` writes, counting into
    ``written_accumulator``: what the stats job and a Spark stage hand back to their caller."""

    query: StreamingQuery
    written_accumulator: Accumulator[int]

    @property
    def written(self) -> int:
        """Records published so far (at least once: a retried micro-batch counts again)."""
        return int(self.written_accumulator.value)

    def stop(self) -> None:
        self.query.stop()
