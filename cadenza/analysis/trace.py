"""Activity traces on the wire: one Avro record per batch of a worker's activities.

A worker records its timeline per interval (a poll, a quantum, a commit), not per record, and sends
those intervals in batches, so the trace costs a few hundred bytes per batch whatever the record rate.

Clocks: times are each worker's wall clock (``time.time()``), in microseconds. Timelines of workers on
one host share a clock. Across hosts the analysis assumes the clocks agree to well under a window
(NTP typically keeps them within a millisecond); a skew of ``d`` shifts that worker's whole timeline by
``d`` against the others, which moves message endpoints (a message may appear to arrive before it
was sent, which the decoder reports) and moves up to ``d`` of activity across each window bound.
"""

from __future__ import annotations

from io import BytesIO
from typing import Any

from fastavro import parse_schema, schemaless_reader, schemaless_writer

from cadenza.analysis.activity import Activity

__all__ = ["ACTIVITY_BATCH_SCHEMA", "decode_batch", "encode_batch"]

ACTIVITY_BATCH_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "ActivityBatch",
    "namespace": "io.cadenza.analysis",
    "doc": "A batch of one worker's activities (SnailTrail), written to the activities topic.",
    "fields": [
        {"name": "worker_id", "type": "string", "doc": "The worker that recorded the batch."},
        {
            "name": "activities",
            "type": {
                "type": "array",
                "items": {
                    "type": "record",
                    "name": "ActivityRecord",
                    "fields": [
                        {"name": "kind", "type": "string"},
                        {
                            "name": "start_us",
                            "type": "long",
                            "doc": "Wall clock of the recorder, microseconds.",
                        },
                        {"name": "end_us", "type": "long"},
                        {"name": "operator", "type": ["null", "string"], "default": None},
                        {"name": "from_worker", "type": ["null", "string"], "default": None},
                        {"name": "topic", "type": ["null", "string"], "default": None},
                    ],
                },
            },
            "doc": "For a message, from_worker sent it at start_us and worker_id received it at end_us.",
        },
    ],
}
_PARSED = parse_schema(ACTIVITY_BATCH_SCHEMA)


def _us(t: float) -> int:
    return round(t * 1_000_000)


def encode_batch(worker_id: str, activities: list[Activity]) -> bytes:
    """Encode ``worker_id``'s activities; a message must be one that ``worker_id`` received."""
    rows: list[dict[str, Any]] = []
    for a in activities:
        if a.is_message and a.to_worker != worker_id:
            raise ValueError(f"{a.describe()} was not received by {worker_id!r}, which records it")
        if not a.is_message and a.worker != worker_id:
            raise ValueError(f"{a.describe()} is not on {worker_id!r}'s timeline")
        rows.append(
            {
                "kind": a.kind,
                "start_us": _us(a.start),
                "end_us": _us(a.end),
                "operator": a.operator,
                "from_worker": a.worker if a.is_message else None,
                "topic": a.topic,
            }
        )
    out = BytesIO()
    schemaless_writer(out, _PARSED, {"worker_id": worker_id, "activities": rows})
    return out.getvalue()


def decode_batch(data: bytes) -> list[Activity]:
    """Decode one batch; raises :class:`ValueError` if it is not a valid batch (truncated, garbage)."""
    try:
        record = schemaless_reader(BytesIO(data), _PARSED, None)
    except Exception as exc:  # fastavro raises many types on garbage: EOFError, UnicodeError, ...
        raise ValueError(f"not an activity batch: {type(exc).__name__}: {exc}") from None
    if not isinstance(record, dict):
        raise ValueError("not an activity batch")
    worker = str(record["worker_id"])
    activities = []
    for row in record["activities"]:
        start, end = row["start_us"] / 1_000_000, row["end_us"] / 1_000_000
        if row["from_worker"] is not None:
            activity = Activity(
                row["from_worker"], start, end, row["kind"], row["operator"], worker, row["topic"]
            )
        else:
            activity = Activity(worker, start, end, row["kind"], row["operator"], None, row["topic"])
        activity.check()
        activities.append(activity)
    return activities
