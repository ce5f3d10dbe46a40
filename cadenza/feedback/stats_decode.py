"""Spans from the metrics topic as Arrow batches: decoded, checked, and bad ones counted, not raised.

The stats job runs for days over a topic any process may write to, so one bad record must cost one
counter increment, never the query. Decoding goes through the same codec as every other span reader
(:data:`~cadenza.infra.metrics.spans.SPAN_CODEC`: fingerprint header check, trailing-byte check), and
on top of the schema the values are checked for what the statistics need: durations finite and
non-negative, a sample ratio in (0, 1] (it becomes a weight ``1 / ratio``). Pure Arrow and fastavro,
so it is tested without Spark; the job calls it from ``mapInArrow`` on the executors.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]

from cadenza.infra.metrics.spans import SPAN_CODEC
from cadenza.schemas.errors import DecodeError

__all__ = [
    "DECODED_SPAN_DDL",
    "DECODED_SPAN_SCHEMA",
    "decode_span_batch",
    "decode_span_batches",
    "span_problem",
]

#: What one decoded span becomes: only the fields the statistics use, plus its weight.
DECODED_SPAN_SCHEMA = pa.schema(
    [
        pa.field("pipeline_id", pa.string()),
        pa.field("operator_id", pa.string()),
        pa.field("tenant_id", pa.string()),
        pa.field("queue_wait_s", pa.float64()),
        pa.field("run_time_s", pa.float64()),
        pa.field("e2e_latency_s", pa.float64()),
        pa.field("met", pa.bool_()),
        pa.field("emitted_at", pa.timestamp("us", tz="UTC")),
        pa.field("weight", pa.float64()),
    ]
)

#: The same columns as Spark sees them (``mapInArrow`` takes a Spark schema).
DECODED_SPAN_DDL = (
    "pipeline_id string, operator_id string, tenant_id string, queue_wait_s double, run_time_s double, "
    "e2e_latency_s double, met boolean, emitted_at timestamp, weight double"
)

_FIELDS = [field.name for field in DECODED_SPAN_SCHEMA if field.name != "weight"]


def _finite_non_negative(value: Any) -> bool:
    return isinstance(value, float) and math.isfinite(value) and value >= 0.0


def span_problem(record: dict[str, Any]) -> str | None:
    """Why a schema-valid span cannot enter the statistics, or None if it can."""
    for name in ("queue_wait_s", "run_time_s"):
        if not _finite_non_negative(record[name]):
            return f"{name} is {record[name]!r}; durations must be finite and non-negative"
    e2e = record["e2e_latency_s"]
    if e2e is not None and not (isinstance(e2e, float) and math.isfinite(e2e)):
        return f"e2e_latency_s is {e2e!r}; it must be finite"
    ratio = record["sample_ratio"]
    if not (isinstance(ratio, float) and 0.0 < ratio <= 1.0):
        return f"sample_ratio is {ratio!r}; it must lie in (0, 1]"
    if not isinstance(record["emitted_at"], datetime):
        return "emitted_at is not a timestamp"
    return None


def decode_span_batch(
    values: list[bytes | None], headers: list[list[tuple[str, bytes | None]] | None]
) -> tuple[pa.RecordBatch, int]:
    """Decode one batch of record values (with their headers); return the good spans and the bad count."""
    columns: dict[str, list[Any]] = {name: [] for name in _FIELDS}
    weights: list[float] = []
    bad = 0
    for value, record_headers in zip(values, headers, strict=True):
        try:
            record = SPAN_CODEC.decode(value, record_headers)
        except DecodeError:
            bad += 1
            continue
        if span_problem(record) is not None:
            bad += 1
            continue
        for name in _FIELDS:
            columns[name].append(record[name])
        weights.append(1.0 / record["sample_ratio"])
    arrays = [pa.array(columns[name], type=DECODED_SPAN_SCHEMA.field(name).type) for name in _FIELDS]
    arrays.append(pa.array(weights, type=pa.float64()))
    return pa.RecordBatch.from_arrays(arrays, schema=DECODED_SPAN_SCHEMA), bad


def _headers(column: pa.Array | None, rows: int) -> list[list[tuple[str, bytes | None]] | None]:
    if column is None:
        return [None] * rows
    return [
        None if entries is None else [(entry["key"], entry["value"]) for entry in entries]
        for entries in column.to_pylist()
    ]


def decode_span_batches(
    batches: Iterator[pa.RecordBatch], count_bad: Callable[[int], None]
) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body: Kafka rows (``value``, optional ``headers``) in, decoded spans out.

    ``count_bad`` receives the number of skipped records per batch (the job passes an accumulator's
    ``add``), so the count reaches the driver without failing or slowing the query.
    """
    for batch in batches:
        names = batch.schema.names
        values = batch.column(names.index("value")).to_pylist()
        header_column = batch.column(names.index("headers")) if "headers" in names else None
        decoded, bad = decode_span_batch(values, _headers(header_column, batch.num_rows))
        if bad:
            count_bad(bad)
        yield decoded
