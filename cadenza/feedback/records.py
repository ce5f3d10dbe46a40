"""The feedback record: one operator's statistics over one window, as the stats job publishes them.

The Spark stats job (PySpark, written separately) computes these from spans and writes them to the
feedback topic; every worker reads them back into its cost model. ``cadenza/schemas/feedback.avsc``
is the contract between the two; :func:`encode_feedback` is the reference writer (tests use it, and
the job's writer may call it or reproduce it from the schema).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

from cadenza.infra.kafka.headers import AnyHeaders
from cadenza.infra.metrics.avsc import AvscCodec, epoch_seconds, to_micros
from cadenza.schemas.errors import DecodeError, EncodeError

__all__ = [
    "CRITICAL_PARTICIPATION_KIND",
    "FEEDBACK_AVSC",
    "FEEDBACK_CODEC",
    "KIND_HEADER",
    "POOL_DECISION_KIND",
    "TRUE_RATES_KIND",
    "FeedbackRecord",
    "decode_feedback",
    "encode_feedback",
    "feedback_key",
]

FEEDBACK_AVSC = "feedback.avsc"
"""The schema file, in ``cadenza/schemas``."""

FEEDBACK_CODEC = AvscCodec(FEEDBACK_AVSC)
"""Shared codec (stateless, thread-safe); its ``headers()`` go on every feedback record."""

KIND_HEADER = "cadenza-kind"
"""Set on records of other kinds that share the feedback topic; the feedback consumer skips them without
counting them malformed, and the dashboard shows the newest of each kind it knows."""

POOL_DECISION_KIND = b"pool-decision"
"""A pool controller's scaling decision (JSON, ``cadenza pool``)."""

CRITICAL_PARTICIPATION_KIND = b"critical-participation"
"""A window's critical-participation summary (JSON, ``cadenza analyze``)."""

TRUE_RATES_KIND = b"true-rates"
"""A worker's per-sub-topology true and observed rates over one window (JSON, keyed by worker id;
:func:`cadenza.scaling.rates.parse_true_rates` reads it)."""

_KEY_SEPARATOR = "\x00"
_TIME_FIELDS = ("window_start", "window_end", "produced_at")


@dataclass(frozen=True, slots=True, kw_only=True)
class FeedbackRecord:
    """Field for field ``feedback.avsc``; times are epoch seconds, durations seconds."""

    pipeline_id: str
    operator_id: str
    tenant_id: str
    window_start: float
    window_end: float
    count: int
    """Spans (sampled executions) in the window."""
    run_time_p50: float
    run_time_p95: float
    run_time_p99: float
    queue_wait_p50: float
    queue_wait_p95: float
    queue_wait_p99: float
    e2e_p50: float | None = None
    e2e_p95: float | None = None
    e2e_p99: float | None = None
    deadline_miss_ratio: float | None = None
    true_processing_rate: float
    """Records per busy second; ``1 / true_processing_rate`` is the mean run time."""
    produced_at: float

    @property
    def key(self) -> bytes:
        return feedback_key(self.pipeline_id, self.operator_id, self.tenant_id)

    @property
    def mean_run_time(self) -> float | None:
        """Busy seconds per record, or None when the rate cannot give one (zero, negative, not finite)."""
        rate = self.true_processing_rate
        if not (0.0 < rate < math.inf):
            return None
        return 1.0 / rate

    def to_avro(self) -> dict[str, Any]:
        """The record as the Avro writer takes it (times as integer microseconds)."""
        record: dict[str, Any] = {field.name: getattr(self, field.name) for field in fields(self)}
        try:
            for name in _TIME_FIELDS:
                record[name] = to_micros(record[name])
        except (ValueError, OverflowError, TypeError) as exc:
            raise EncodeError(
                f"cannot encode OperatorStats: {type(exc).__name__}: {exc}", error_type=type(exc).__name__
            ) from exc
        return record


def feedback_key(pipeline_id: str, operator_id: str, tenant_id: str) -> bytes:
    """The Kafka key of an operator's feedback: with a compacted topic, the newest record per key stays."""
    return _KEY_SEPARATOR.join((pipeline_id, operator_id, tenant_id)).encode()


def encode_feedback(record: FeedbackRecord) -> bytes:
    """The schemaless Avro body of ``record``; raises :class:`~cadenza.schemas.EncodeError`."""
    return FEEDBACK_CODEC.encode(record.to_avro())


def decode_feedback(data: bytes | None, headers: AnyHeaders = None) -> FeedbackRecord:
    """The record in ``data``; raises :class:`DecodeError` (and nothing else) for bad input.

    Checks the Avro structure only; whether the statistics are usable is the consumer's decision.
    """
    record = FEEDBACK_CODEC.decode(data, headers)
    try:
        for name in _TIME_FIELDS:
            record[name] = epoch_seconds(record[name])
        return FeedbackRecord(**record)
    except Exception as exc:  # a schema-valid body whose values Python cannot represent
        raise DecodeError(
            f"invalid OperatorStats: {type(exc).__name__}: {exc}", error_type=type(exc).__name__
        ) from exc
