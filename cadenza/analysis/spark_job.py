"""``cadenza analyze --spark``: the same critical-participation analysis, with the windows grouped in Spark.

One process reading every activity batch stops keeping up with a large pool; here the activities
topic is read by the ``cadenza-kafka`` reader, each activity is sent to every window it touches, and
each window's CP runs in a pandas UDF (``applyInPandas``) that calls the very functions the
in-process ``cadenza analyze`` calls, so the two cannot drift apart. The read is an ``availableNow``
query into Parquet (the source is streaming-only), and the windows are a batch job over that.
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd  # type: ignore[import-untyped]

from cadenza.analysis import Activity, WindowSummary, window_summaries
from cadenza.analysis.trace import decode_batch
from cadenza.infra.spark.datasource import kafka_options, register
from cadenza.settings import KafkaSettings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["SparkAnalysis", "spark_window_summaries", "windows_touched"]

_ACTIVITY_SCHEMA = (
    "window long, worker string, start double, end double, kind string, operator string, "
    "to_worker string, topic string"
)
_RESULT_SCHEMA = "window long, summary string, error string"


@dataclass(frozen=True)
class SparkAnalysis:
    """The summaries of the windows, in order, and what could not be analysed."""

    summaries: list[WindowSummary]
    skipped: dict[float, str]
    bad_batches: int


def windows_touched(activity: Activity, begin: float, width: float, end: float) -> list[int]:
    """Indexes ``k`` of the windows ``[begin + k*width, min(begin + (k+1)*width, end))`` it touches.

    "Touches" as the in-process analysis means it: an interval overlapping the window, or a message
    with an endpoint inside it (bounds included).
    """
    count = math.ceil((end - begin) / width)
    first = max(0, math.floor((min(activity.start, activity.end) - begin) / width) - 1)
    last = min(count - 1, math.floor((max(activity.start, activity.end) - begin) / width) + 1)
    found: list[int] = []
    for k in range(first, last + 1):
        lo, hi = begin + k * width, min(begin + (k + 1) * width, end)
        if activity.is_message:
            hit = lo <= activity.start <= hi or lo <= activity.end <= hi
        else:
            hit = activity.start < hi and lo < activity.end
        if hit:
            found.append(k)
    return found


def spark_window_summaries(
    spark: SparkSession,
    settings: KafkaSettings,
    topic: str,
    *,
    begin: float,
    end: float,
    width: float,
    workdir: Path,
) -> SparkAnalysis:
    """Summaries of the windows of ``[begin, end)`` over the whole of ``topic``, computed in Spark.

    Every window of the range gets a summary (one with no activity: every worker's unknown gap), as
    in the in-process analysis; a window whose activities cannot form a graph is in ``skipped`` with
    the reason instead of failing the job.
    """
    if not width > 0:
        raise ValueError(f"window width must be positive, got {width!r}")
    if not end > begin:
        raise ValueError(f"analysis range [{begin!r}, {end!r}) must end after it starts")
    register(spark)
    raw = workdir / f"activities-{uuid.uuid4().hex[:8]}"
    stream = (
        spark.readStream.format("cadenza-kafka")
        .options(**kafka_options(settings))
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("includeHeaders", "false")
        .load()
        .select("value")
    )
    query = (
        stream.writeStream.format("parquet")
        .option("path", str(raw / "data"))
        .option("checkpointLocation", str(raw / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    batches = spark.read.schema("value binary").parquet(str(raw / "data"))

    def explode(frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for frame in frames:
            rows: list[tuple[object, ...]] = []
            for value in frame["value"]:
                try:
                    activities = decode_batch(bytes(value)) if value is not None else []
                except ValueError:
                    rows.append((-1, "", 0.0, 0.0, "", None, None, None))  # counted as a bad batch
                    continue
                for a in activities:
                    rows.extend(
                        (k, a.worker, a.start, a.end, a.kind, a.operator, a.to_worker, a.topic)
                        for k in windows_touched(a, begin, width, end)
                    )
            yield pd.DataFrame(rows, columns=_COLUMNS)

    activities = batches.mapInPandas(explode, _ACTIVITY_SCHEMA).cache()
    bad = activities.filter("window < 0").count()
    rows = activities.filter("window >= 0")
    workers = sorted(r[0] for r in rows.select("worker").distinct().collect())

    def analyse(frame: pd.DataFrame) -> pd.DataFrame:
        k = int(frame["window"].iloc[0])
        lo, hi = begin + k * width, min(begin + (k + 1) * width, end)
        inside = [_activity(row) for row in frame.itertuples(index=False)]
        try:
            (summary,) = window_summaries(inside, lo, hi, hi - lo, workers=workers)
        except ValueError as exc:
            return pd.DataFrame([(k, None, str(exc))], columns=["window", "summary", "error"])
        return pd.DataFrame(
            [(k, json.dumps(summary.to_json()), None)], columns=["window", "summary", "error"]
        )

    results = rows.groupBy("window").applyInPandas(analyse, _RESULT_SCHEMA).collect()
    activities.unpersist()
    found = {int(r["window"]): r for r in results}
    summaries: list[WindowSummary] = []
    skipped: dict[float, str] = {}
    for k in range(math.ceil((end - begin) / width)) if workers else ():
        lo, hi = begin + k * width, min(begin + (k + 1) * width, end)
        row = found.get(k)
        if row is None:
            summaries.extend(window_summaries([], lo, hi, hi - lo, workers=workers))
        elif row["error"] is not None:
            skipped[lo] = str(row["error"])
        else:
            summaries.append(WindowSummary.from_json(json.loads(row["summary"])))
    return SparkAnalysis(summaries, skipped, int(bad))


_COLUMNS = ["window", "worker", "start", "end", "kind", "operator", "to_worker", "topic"]


def _activity(row: Sequence[object]) -> Activity:
    _, worker, start, end, kind, operator, to_worker, topic = row
    return Activity(
        str(worker),
        float(start),  # type: ignore[arg-type]
        float(end),  # type: ignore[arg-type]
        str(kind),
        _text(operator),
        _text(to_worker),
        _text(topic),
    )


def _text(value: object) -> str | None:
    """pandas turns a missing string into None or NaN depending on the column; both mean absent."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return str(value)
