"""The span: one operator execution of one record, and its Avro form on the metrics topic.

Spans are the raw material of every latency statistic (the Spark stats job) and of later critical-path
analysis (SnailTrail), so they record measurements, not conclusions: how long the record waited and
ran, when the run ended, and the deadline it was held to. The contract with readers in other
languages is ``cadenza/schemas/spans.avsc``; this module only maps it to Python.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from cadenza.infra.kafka.headers import AnyHeaders
from cadenza.infra.metrics.avsc import AvscCodec, epoch_seconds, to_micros
from cadenza.schemas.errors import DecodeError, EncodeError

__all__ = ["SPANS_AVSC", "SPAN_CODEC", "Span", "SpanRun", "decode_span", "encode_span", "span_key"]

SPANS_AVSC = "spans.avsc"
"""The schema file, in ``cadenza/schemas``."""

SPAN_CODEC = AvscCodec(SPANS_AVSC)
"""Shared codec (stateless, thread-safe); its ``headers()`` go on every span record."""

SpanRun = tuple[str, str, str, int, int, float, float, float, float, float, bool]
"""The raw measurements of one operator run, as the executor hands them to
:meth:`SpanEmitter.emit <cadenza.infra.metrics.emitter.SpanEmitter.emit>` and in its argument order:
``(tenant_id, pipeline_id, operator_id, partition, trace_id, queue_wait, run_time, frontier_time,
latency_target, at, sink)``. A plain tuple, built once per sampled run on the hot path; the span is
derived from it later, off that path (:meth:`Span.from_run`, or the emitter's encoder directly)."""

_MASK = (1 << 64) - 1
_SIGN = 1 << 63
_WRAP = 1 << 64


class Span(NamedTuple):
    """Field for field ``spans.avsc``; times are epoch seconds, durations seconds.

    A named tuple: cheap to build in bulk when a tool decodes a topic's worth of spans, and never
    mutated. (The emitter does not build these at all; it encodes runs directly with
    :class:`~cadenza.infra.metrics.span_writer.SpanWriter`.)
    """

    pipeline_id: str
    tenant_id: str
    operator_id: str
    worker_id: str
    partition: int
    trace_id: int
    """Unsigned 64-bit."""
    queue_wait_s: float
    run_time_s: float
    e2e_latency_s: float | None
    """Set for a sink operator's execution only."""
    deadline: float
    """``t_F + L``."""
    met: bool | None
    """Whether a sink result was emitted by ``deadline``; ``None`` for other operators."""
    emitted_at: float
    """When the run finished."""
    sample_ratio: float = 1.0

    @classmethod
    def from_run(cls, worker_id: str, run: SpanRun, sample_ratio: float = 1.0) -> Span:
        """Derive the span of a run: the deadline is ``t_F + L``; a sink's latency is ``at - t_F``.

        ``at`` is when the run finished, which for a sink is when its result was handed to Kafka: the
        moment the pipeline's latency target is about.
        """
        tenant, pipeline, operator, partition, trace, wait, ran, t_f, target, at, sink = run
        deadline = t_f + target
        return cls(
            pipeline,
            tenant,
            operator,
            worker_id,
            partition,
            trace,
            wait,
            ran,
            at - t_f if sink else None,
            deadline,
            (at <= deadline) if sink else None,
            at,
            sample_ratio,
        )


def span_key(trace_id: int) -> bytes:
    """The Kafka key of a span: its trace id, 8 bytes big-endian, so a trace stays in one partition."""
    return (trace_id & _MASK).to_bytes(8, "big")


def encode_span(span: Span) -> bytes:
    """The schemaless Avro body of ``span``; raises :class:`~cadenza.schemas.EncodeError`.

    Goes through fastavro and the schema file: the reference encoding, which the emitter's faster
    hand-written writer is tested against.
    """
    trace = span.trace_id & _MASK
    return SPAN_CODEC.encode(
        {
            "pipeline_id": span.pipeline_id,
            "tenant_id": span.tenant_id,
            "operator_id": span.operator_id,
            "worker_id": span.worker_id,
            "partition": span.partition,
            "trace_id": trace - _WRAP if trace >= _SIGN else trace,
            "queue_wait_s": span.queue_wait_s,
            "run_time_s": span.run_time_s,
            "e2e_latency_s": span.e2e_latency_s,
            "deadline": _micros(span.deadline),
            "met": span.met,
            "emitted_at": _micros(span.emitted_at),
            "sample_ratio": span.sample_ratio,
        }
    )


def _micros(seconds: float) -> int:
    if not math.isfinite(seconds):
        raise EncodeError(f"cannot encode Span: time {seconds!r} is not finite", error_type="ValueError")
    return to_micros(seconds)


def decode_span(data: bytes | None, headers: AnyHeaders = None) -> Span:
    """The span in ``data``; raises :class:`DecodeError` (and nothing else) for bad input."""
    record = SPAN_CODEC.decode(data, headers)
    try:
        return Span(
            record["pipeline_id"],
            record["tenant_id"],
            record["operator_id"],
            record["worker_id"],
            record["partition"],
            record["trace_id"] & _MASK,
            record["queue_wait_s"],
            record["run_time_s"],
            record["e2e_latency_s"],
            epoch_seconds(record["deadline"]),
            record["met"],
            epoch_seconds(record["emitted_at"]),
            record["sample_ratio"],
        )
    except Exception as exc:  # a schema-valid body whose values Python cannot represent
        raise DecodeError(
            f"invalid Span: {type(exc).__name__}: {exc}", error_type=type(exc).__name__
        ) from exc
