"""Prometheus export of the per-record metrics in :mod:`cadenza.infra.metrics.names`.

Recording happens for every record on the executor thread, so it must cost next to nothing. With
prometheus_client's own ``Counter``/``Histogram`` children a record's counters and two histograms
take a lock per update, about 4 us per record on the development machine (measured by
``benchmarks/probes/bench_spans.py``), a large share of a Python worker's per-record budget. So:

- the series of one (tenant, pipeline, operator) are pre-bound once into an :class:`OperatorMetrics`
  (cached by :meth:`PrometheusExporter.operator`), whose counters are plain ints and whose histograms
  are bucket arrays, updated without locks by the single thread that runs records;
- at scrape time a collector registered in the exporter's own ``CollectorRegistry`` turns them into
  prometheus_client metric families, so exposition, content negotiation and the HTTP side are still
  prometheus_client's.

A scrape reads while the executor writes: a list copy is atomic under the GIL, so each histogram's
buckets and count are consistent; its sum may be one observation ahead or behind, which no rate or
quantile query can notice. Counters owned by other components (span drops, feedback) are read
through callbacks at scrape time, so those components need no Prometheus code at all.

The registry is the exporter's own, never prometheus_client's global one: two workers (or a test and
a worker) in one process must not share or collide on series.
"""

from __future__ import annotations

import logging
import math
from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Protocol

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.utils import floatToGoString

from cadenza.infra.metrics import names
from cadenza.infra.metrics.names import MetricDef, MetricKind
from cadenza.infra.metrics.quantiles import Buckets
from cadenza.infra.metrics.server import HealthState, MetricsServer, serve_metrics

if TYPE_CHECKING:
    from cadenza.infra.metrics.emitter import SpanEmitter

__all__ = ["CallbackValue", "FeedbackCounts", "LatencyHistogram", "OperatorMetrics", "PrometheusExporter"]

_log = logging.getLogger("cadenza.metrics.prometheus")

_INF = math.inf

# prometheus_client's own formatting of bucket bounds (untyped there; typed here).
_go_float: Callable[[float], str] = floatToGoString

CallbackValue = float | int | Mapping[tuple[str, ...], float | int]
"""What a callback returns: one value for a metric without labels, else values by label tuple."""


class FeedbackCounts(Protocol):
    """What the exporter reads of a feedback consumer: its applied, rejected and superseded counts.

    :class:`cadenza.feedback.consumer.FeedbackConsumer` is one; infrastructure names no feature.
    """

    superseded: int

    def applied_by_operator(self) -> dict[tuple[str, ...], int]: ...

    def rejected_by_reason(self) -> dict[tuple[str, ...], int]: ...


class LatencyHistogram:
    """Bucket counts and a sum; ``observe`` is one bisect and two increments, lock-free (one writer)."""

    __slots__ = ("bounds", "counts", "les", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.les = [_go_float(bound) for bound in (*bounds, _INF)]
        self.counts = [0] * (len(bounds) + 1)  # the last one is +Inf
        self.sum = 0.0

    def observe(self, value: float) -> None:
        """Count ``value`` seconds; negative or non-finite values (a clock step) are ignored."""
        if 0.0 <= value < _INF:
            self.counts[bisect_left(self.bounds, value)] += 1
            self.sum += value

    def observe_many(self, value: float, count: int) -> None:
        """Count ``value`` seconds ``count`` times (records that share one measurement), as
        :meth:`observe` would one by one."""
        if 0.0 <= value < _INF:
            self.counts[bisect_left(self.bounds, value)] += count
            self.sum += value * count

    @property
    def count(self) -> int:
        return sum(self.counts)

    def buckets(self) -> Buckets:
        """Cumulative counts by upper bound, ``+Inf`` last: the form quantiles and deltas are taken
        of (:mod:`cadenza.infra.metrics.quantiles`)."""
        counts = self.counts.copy()  # atomic under the GIL: one consistent set of buckets
        cumulative: Buckets = {}
        running = 0
        for bound, count in zip((*self.bounds, _INF), counts, strict=True):
            running += count
            cumulative[bound] = float(running)
        return cumulative

    def cumulative(self) -> tuple[list[tuple[str, float]], float]:
        """``(le, cumulative count)`` pairs ending with ``+Inf``, and the sum, as exposition wants."""
        buckets = self.buckets()
        return list(zip(self.les, buckets.values(), strict=True)), self.sum


class OperatorMetrics:
    """The pre-bound series of one (tenant, pipeline, operator); written by one thread only.

    Counters are public ints: the worker bumps them directly (``m.consumed += 1``), the cheapest
    update Python has. Runs and sink results go through :meth:`record_run` and :meth:`record_sink`,
    which keep the counters and histograms that belong together in step; the worker's executor and
    sink stamp do the same work inlined (a call per record costs more than the work), the executor
    adding a quantum's processed count and histogram sums once per quantum.
    """

    __slots__ = (
        "consumed",
        "context_garbled",
        "context_missing",
        "context_rejected",
        "dead_lettered",
        "deadlines_met",
        "deadlines_missed",
        "e2e_latency",
        "fetch_latency",
        "labels",
        "late",
        "processed",
        "produce_ack",
        "produced",
        "queue_wait",
        "repartition_hop",
        "run_time",
        "sink",
        "window_close_wait",
    )

    def __init__(self, tenant: str, pipeline: str, operator: str, *, sink: bool = False) -> None:
        self.labels = (tenant, pipeline, operator)
        self.sink = sink
        self.consumed = 0
        self.processed = 0
        self.produced = 0
        self.late = 0
        self.context_missing = 0
        self.context_garbled = 0
        self.context_rejected = 0
        self.deadlines_met = 0
        self.deadlines_missed = 0
        self.dead_lettered: dict[str, int] = {}
        self.queue_wait = LatencyHistogram(names.QUEUE_WAIT.buckets)
        self.run_time = LatencyHistogram(names.RUN_TIME.buckets)
        self.e2e_latency = LatencyHistogram(names.E2E_LATENCY.buckets)
        # Stages of a record's latency, each observed where it ends (see names.py).
        self.fetch_latency = LatencyHistogram(names.FETCH_LATENCY.buckets)
        self.repartition_hop = LatencyHistogram(names.REPARTITION_HOP.buckets)
        self.produce_ack = LatencyHistogram(names.PRODUCE_ACK.buckets)
        self.window_close_wait = LatencyHistogram(names.WINDOW_CLOSE_WAIT.buckets)

    def record_run(self, queue_wait: float, run_time: float) -> None:
        """One execution: ``cadenza_records_processed`` and the queue-wait and run-time histograms."""
        self.processed += 1
        histogram = self.queue_wait
        if 0.0 <= queue_wait < _INF:
            histogram.counts[bisect_left(histogram.bounds, queue_wait)] += 1
            histogram.sum += queue_wait
        histogram = self.run_time
        if 0.0 <= run_time < _INF:
            histogram.counts[bisect_left(histogram.bounds, run_time)] += 1
            histogram.sum += run_time

    def record_sink(self, e2e_latency: float, met: bool) -> None:
        """One sink result: its end-to-end latency and whether it met ``t_F + L``."""
        histogram = self.e2e_latency
        if 0.0 <= e2e_latency < _INF:  # LatencyHistogram.observe, inlined: once per result
            histogram.counts[bisect_left(histogram.bounds, e2e_latency)] += 1
            histogram.sum += e2e_latency
        if met:
            self.deadlines_met += 1
        else:
            self.deadlines_missed += 1

    def dead_letter(self, reason: str) -> None:
        """One record sent to a dead-letter topic.

        ``reason`` is ``decode``, ``function``, ``context`` or ``quarantined``.
        """
        self.dead_lettered[reason] = self.dead_lettered.get(reason, 0) + 1


# (metric, OperatorMetrics attribute, only for sinks) for the per-operator counters.
_OPERATOR_COUNTERS: tuple[tuple[MetricDef, str, bool], ...] = (
    (names.RECORDS_CONSUMED, "consumed", False),
    (names.RECORDS_PROCESSED, "processed", False),
    (names.RECORDS_PRODUCED, "produced", False),
    (names.RECORDS_LATE, "late", False),
    (names.CONTEXT_HEADERS_MISSING, "context_missing", False),
    (names.CONTEXT_HEADERS_GARBLED, "context_garbled", False),
    (names.CONTEXT_HEADERS_REJECTED, "context_rejected", False),
    (names.DEADLINES_MET, "deadlines_met", True),
    (names.DEADLINES_MISSED, "deadlines_missed", True),
)
_OPERATOR_HISTOGRAMS: tuple[tuple[MetricDef, str, bool], ...] = (
    (names.QUEUE_WAIT, "queue_wait", False),
    (names.RUN_TIME, "run_time", False),
    (names.E2E_LATENCY, "e2e_latency", True),
)
# The stage histograms: only the operators at which a stage ends observe it, so each series is
# exported once it has an observation.
_STAGE_HISTOGRAMS: tuple[tuple[MetricDef, str], ...] = (
    (names.FETCH_LATENCY, "fetch_latency"),
    (names.REPARTITION_HOP, "repartition_hop"),
    (names.PRODUCE_ACK, "produce_ack"),
    (names.WINDOW_CLOSE_WAIT, "window_close_wait"),
)
_OPERATOR_METRICS = frozenset(
    [m for m, _, _ in _OPERATOR_COUNTERS]
    + [m for m, _, _ in _OPERATOR_HISTOGRAMS]
    + [m for m, _ in _STAGE_HISTOGRAMS]
    + [names.RECORDS_DEAD_LETTERED]
)


class _OperatorCollector:
    """Renders every :class:`OperatorMetrics` at scrape time."""

    def __init__(self, operators: dict[tuple[str, str, str], OperatorMetrics]) -> None:
        self._operators = operators

    def describe(self) -> Iterable[Metric]:
        # Lets the registry refuse a second collector exporting the same names.
        for metric in _OPERATOR_METRICS:
            yield _family(metric)

    def collect(self) -> Iterable[Metric]:
        operators = list(self._operators.values())  # atomic copy; the executor may add meanwhile
        for metric, attribute, sink_only in _OPERATOR_COUNTERS:
            family = CounterMetricFamily(metric.name, metric.help, labels=metric.labels)
            for ops in operators:
                value: int = getattr(ops, attribute)
                if ops.sink or value or not sink_only:
                    family.add_metric(ops.labels, value)
            yield family
        dead = CounterMetricFamily(
            names.RECORDS_DEAD_LETTERED.name,
            names.RECORDS_DEAD_LETTERED.help,
            labels=names.RECORDS_DEAD_LETTERED.labels,
        )
        for ops in operators:
            for reason, count in ops.dead_lettered.copy().items():
                dead.add_metric((*ops.labels, reason), count)
        yield dead
        for metric, attribute, sink_only in _OPERATOR_HISTOGRAMS:
            histogram_family = HistogramMetricFamily(metric.name, metric.help, labels=metric.labels)
            for ops in operators:
                histogram: LatencyHistogram = getattr(ops, attribute)
                if sink_only and not ops.sink and not any(histogram.counts):
                    continue
                buckets, total = histogram.cumulative()
                histogram_family.add_metric(ops.labels, buckets, total)
            yield histogram_family
        for metric, attribute in _STAGE_HISTOGRAMS:
            histogram_family = HistogramMetricFamily(metric.name, metric.help, labels=metric.labels)
            for ops in operators:
                histogram = getattr(ops, attribute)
                if any(histogram.counts):
                    buckets, total = histogram.cumulative()
                    histogram_family.add_metric(ops.labels, buckets, total)
            yield histogram_family


class _CallbackCollector:
    """One metric whose values another component keeps; read when Prometheus scrapes."""

    def __init__(self, metric: MetricDef, read: Callable[[], CallbackValue]) -> None:
        if metric.kind is MetricKind.HISTOGRAM:
            raise ValueError(f"{metric.name}: callbacks export counters and gauges, not histograms")
        self._metric = metric
        self._read = read

    def describe(self) -> Iterable[Metric]:
        yield _family(self._metric)

    def collect(self) -> Iterable[Metric]:
        metric = self._metric
        family: CounterMetricFamily | GaugeMetricFamily
        if metric.kind is MetricKind.COUNTER:
            family = CounterMetricFamily(metric.name, metric.help, labels=metric.labels)
        else:
            family = GaugeMetricFamily(metric.name, metric.help, labels=metric.labels)
        try:
            value = self._read()
        except Exception:  # a broken callback must not break the whole scrape
            _log.exception("reading metric %s failed", metric.name)
            return
        if isinstance(value, Mapping):
            for labels, number in value.items():
                if len(labels) != len(metric.labels):
                    _log.error("metric %s: labels %r do not match %r", metric.name, labels, metric.labels)
                    continue
                family.add_metric(labels, float(number))
        elif metric.labels:
            _log.error("metric %s has labels %r but its callback gave one value", metric.name, metric.labels)
            return
        else:
            family.add_metric((), float(value))
        yield family


def _family(metric: MetricDef) -> CounterMetricFamily | GaugeMetricFamily | HistogramMetricFamily:
    if metric.kind is MetricKind.COUNTER:
        return CounterMetricFamily(metric.name, metric.help, labels=metric.labels)
    if metric.kind is MetricKind.GAUGE:
        return GaugeMetricFamily(metric.name, metric.help, labels=metric.labels)
    return HistogramMetricFamily(metric.name, metric.help, labels=metric.labels)


class PrometheusExporter:
    """The metrics of one worker, in a registry of their own, servable over HTTP.

    Typical wiring::

        exporter = PrometheusExporter()
        ops = exporter.operator("ads", "clicks", "count")      # once per operator, kept by the caller
        ops.record_run(queue_wait, run_time)                   # per record, executor thread
        exporter.register_callback(names.BUFFERED_RECORDS, lambda: scheduler.size)
        exporter.track_span_emitter(emitter); exporter.track_feedback(feedback)
        server = exporter.start_http(9464, host="0.0.0.0")
        exporter.health.ready = True                           # after the group join and restore
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        self.health = HealthState()
        self._operators: dict[tuple[str, str, str], OperatorMetrics] = {}
        self.registry.register(_OperatorCollector(self._operators))

    def operator(self, tenant: str, pipeline: str, operator: str, *, sink: bool = False) -> OperatorMetrics:
        """The pre-bound series of an operator (created on first use, then the same object).

        ``sink=True`` exports its deadline counters and latency histogram even before the first
        result, so dashboards show a zero instead of a gap.
        """
        key = (tenant, pipeline, operator)
        metrics = self._operators.get(key)
        if metrics is None:
            metrics = self._operators[key] = OperatorMetrics(tenant, pipeline, operator, sink=sink)
        elif sink:
            metrics.sink = True
        return metrics

    def operators(self) -> list[OperatorMetrics]:
        return list(self._operators.values())

    def register_callback(self, metric: MetricDef, read: Callable[[], CallbackValue]) -> None:
        """Export ``metric`` from ``read()``, called at each scrape (on the HTTP thread).

        ``read`` returns a number for a metric without labels, else a mapping from label-value tuples
        (in ``metric.labels`` order) to numbers. Counters must only grow. Registering a name twice,
        or one of the per-operator metrics, raises ``ValueError``.
        """
        if metric in _OPERATOR_METRICS:
            raise ValueError(f"{metric.name} is recorded per operator; use operator(...) instead")
        self.registry.register(_CallbackCollector(metric, read))

    def track_span_emitter(self, emitter: SpanEmitter) -> None:
        """Export the emitter's produced and dropped span counts."""
        self.register_callback(names.SPANS_PRODUCED, lambda: emitter.delivered)
        self.register_callback(names.SPANS_DROPPED, emitter.dropped_by_reason)

    def track_feedback(self, feedback: FeedbackCounts) -> None:
        """Export the feedback consumer's applied, rejected and superseded counts."""
        self.register_callback(names.FEEDBACK_APPLIED, feedback.applied_by_operator)
        self.register_callback(names.FEEDBACK_REJECTED, feedback.rejected_by_reason)
        self.register_callback(names.FEEDBACK_SUPERSEDED, lambda: feedback.superseded)

    def render(self) -> bytes:
        """The text exposition, as a scrape would get it."""
        return generate_latest(self.registry)

    def start_http(self, port: int = 0, host: str = "127.0.0.1") -> MetricsServer:
        """Serve ``/metrics``, ``/healthz`` and ``/readyz`` on ``host:port`` (0: a free port)."""
        return serve_metrics(self.registry, self.health, port=port, host=host)
