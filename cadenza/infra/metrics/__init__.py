"""Metrics and cost feedback: what a worker measures, where it goes, and how it comes back.

- :mod:`~cadenza.infra.metrics.names`: every exported metric, declared once;
- :mod:`~cadenza.infra.metrics.prometheus` and :mod:`~cadenza.infra.metrics.server`: per-operator
  counters and histograms served over HTTP with liveness and readiness probes;
- :mod:`~cadenza.infra.metrics.spans`, :mod:`~cadenza.infra.metrics.sampling`,
  :mod:`~cadenza.infra.metrics.span_writer`, :mod:`~cadenza.infra.metrics.emitter`,
  :mod:`~cadenza.infra.metrics.span_sink`: one span per
  operator execution, sampled by trace and sent in batches to the metrics topic (``spans.avsc``);
- :mod:`~cadenza.infra.metrics.discovery`: each worker announces its metrics URL on a compacted
  topic, so the dashboard finds the workers of a pool that scales;
- :mod:`~cadenza.infra.metrics.feedback` and :mod:`~cadenza.infra.metrics.feedback_consumer`: the
  stats job's per-operator statistics (``feedback.avsc``) read back into the cost model.

See ``cadenza/schemas/METRICS.md`` for the records, the names and the sampling and batching rules.
"""

from cadenza.infra.metrics import names
from cadenza.infra.metrics.avsc import AvscCodec, epoch_seconds, load_avsc, to_micros
from cadenza.infra.metrics.discovery import (
    DEFAULT_DISCOVERY_TOPIC,
    Announcement,
    AnnouncementError,
    WorkerAnnouncer,
    advertised_url,
    discovery_topic_spec,
    parse_announcement,
)
from cadenza.infra.metrics.emitter import SpanEmitter
from cadenza.infra.metrics.feedback import (
    FEEDBACK_AVSC,
    FEEDBACK_CODEC,
    FeedbackRecord,
    decode_feedback,
    encode_feedback,
    feedback_key,
)
from cadenza.infra.metrics.feedback_consumer import FeedbackConsumer, RunTimeStatistic, run_time_statistic
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
    "DEFAULT_DISCOVERY_TOPIC",
    "DEFAULT_FEEDBACK_TOPIC",
    "DEFAULT_SPANS_TOPIC",
    "FEEDBACK_AVSC",
    "FEEDBACK_CODEC",
    "FIBONACCI_MULTIPLIER",
    "SPANS_AVSC",
    "SPAN_CODEC",
    "SPAN_PRODUCER_DEFAULTS",
    "Announcement",
    "AnnouncementError",
    "AvscCodec",
    "CallbackValue",
    "FeedbackConsumer",
    "FeedbackRecord",
    "HealthState",
    "KafkaSpanSink",
    "LatencyHistogram",
    "MetricDef",
    "MetricKind",
    "MetricsServer",
    "OperatorMetrics",
    "PrometheusExporter",
    "RunTimeStatistic",
    "Span",
    "SpanEmitter",
    "SpanSink",
    "SpanWriter",
    "WorkerAnnouncer",
    "advertised_url",
    "decode_feedback",
    "decode_span",
    "discovery_topic_spec",
    "encode_feedback",
    "encode_span",
    "epoch_seconds",
    "feedback_key",
    "is_sampled",
    "load_avsc",
    "metrics_topic_specs",
    "names",
    "parse_announcement",
    "run_time_statistic",
    "sample_threshold",
    "serve_metrics",
    "span_key",
    "to_micros",
    "trace_hash",
]
