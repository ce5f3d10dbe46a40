"""Metrics: what a worker measures and where it goes.

- :mod:`~cadenza.infra.metrics.names`: every exported metric, declared once;
- :mod:`~cadenza.infra.metrics.prometheus` and :mod:`~cadenza.infra.metrics.server`: per-operator
  counters and histograms served over HTTP with liveness and readiness probes;
- :mod:`~cadenza.infra.metrics.spans`, :mod:`~cadenza.infra.metrics.sampling`,
  :mod:`~cadenza.infra.metrics.span_writer`, :mod:`~cadenza.infra.metrics.emitter`,
  :mod:`~cadenza.infra.metrics.span_sink`: one span per
  operator execution, sampled by trace and sent in batches to the metrics topic (``spans.avsc``).

How the statistics come back into the cost model is :mod:`cadenza.feedback`'s; how the dashboard
finds the workers, :mod:`cadenza.worker.announcer`'s.

See ``cadenza/schemas/METRICS.md`` for the records, the names and the sampling and batching rules.
"""

from cadenza.infra.metrics import names
from cadenza.infra.metrics.avsc import AvscCodec, epoch_seconds, load_avsc, to_micros
from cadenza.infra.metrics.emitter import SpanEmitter
from cadenza.infra.metrics.names import ALL_METRICS, MetricDef, MetricKind
from cadenza.infra.metrics.prometheus import (
    CallbackValue,
    LatencyHistogram,
    OperatorMetrics,
    PrometheusExporter,
)
from cadenza.infra.metrics.sampling import FIBONACCI_MULTIPLIER, is_sampled, sample_threshold, trace_hash
from cadenza.infra.metrics.server import HealthState, MetricsServer, serve_metrics
from cadenza.infra.metrics.span_sink import SPAN_PRODUCER_DEFAULTS, KafkaSpanSink, SpanSink
from cadenza.infra.metrics.span_writer import SpanWriter
from cadenza.infra.metrics.spans import SPAN_CODEC, SPANS_AVSC, Span, decode_span, encode_span, span_key
from cadenza.infra.metrics.topics import DEFAULT_FEEDBACK_TOPIC, DEFAULT_SPANS_TOPIC, metrics_topic_specs

__all__ = [
    "ALL_METRICS",
    "DEFAULT_FEEDBACK_TOPIC",
    "DEFAULT_SPANS_TOPIC",
    "FIBONACCI_MULTIPLIER",
    "SPANS_AVSC",
    "SPAN_CODEC",
    "SPAN_PRODUCER_DEFAULTS",
    "AvscCodec",
    "CallbackValue",
    "HealthState",
    "KafkaSpanSink",
    "LatencyHistogram",
    "MetricDef",
    "MetricKind",
    "MetricsServer",
    "OperatorMetrics",
    "PrometheusExporter",
    "Span",
    "SpanEmitter",
    "SpanSink",
    "SpanWriter",
    "decode_span",
    "encode_span",
    "epoch_seconds",
    "is_sampled",
    "load_avsc",
    "metrics_topic_specs",
    "names",
    "sample_threshold",
    "serve_metrics",
    "span_key",
    "to_micros",
    "trace_hash",
]
