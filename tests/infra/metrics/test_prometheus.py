"""The Prometheus exporter, scraped over real HTTP on loopback: exact series values and the probes."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from cadenza.infra.metrics import names
from cadenza.infra.metrics.emitter import SpanEmitter
from cadenza.infra.metrics.prometheus import LatencyHistogram, PrometheusExporter
from cadenza.infra.metrics.server import MetricsServer
from tests.infra.metrics.helpers import ListSink

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def scrape(server: MetricsServer) -> Samples:
    status, text = get(f"{server.url}/metrics")
    assert status == 200
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def labels(operator: str, **extra: str) -> frozenset[tuple[str, str]]:
    return frozenset({"tenant": "ads", "pipeline": "clicks", "operator": operator, **extra}.items())


@pytest.fixture
def exporter() -> PrometheusExporter:
    return PrometheusExporter()


@pytest.fixture
def server(exporter: PrometheusExporter) -> Iterator[MetricsServer]:
    server = exporter.start_http(0)
    try:
        yield server
    finally:
        server.close()


def test_scrape_gives_exact_values(exporter: PrometheusExporter, server: MetricsServer) -> None:
    ops = exporter.operator("ads", "clicks", "map")
    assert exporter.operator("ads", "clicks", "map") is ops  # pre-bound once, then cached
    ops.consumed += 3
    ops.record_run(0.0003, 0.002)
    ops.record_run(0.0003, 0.002)
    ops.record_run(0.07, 0.5)
    ops.record_run(-1.0, float("nan"))  # a clock step: counted as a run, kept out of the histograms
    ops.dead_letter("decode")
    ops.dead_letter("decode")
    ops.dead_letter("function")
    ops.late += 1
    ops.context_missing += 4
    ops.context_garbled += 1
    sink = exporter.operator("ads", "clicks", "sink", sink=True)
    sink.produced += 2
    sink.record_sink(0.05, True)  # exactly on a bucket bound: counted in that bucket (le)
    sink.record_sink(2.0, False)
    exporter.register_callback(names.BUFFERED_RECORDS, lambda: 42)
    exporter.register_callback(names.PAUSED_PARTITIONS, lambda: 1)

    samples = scrape(server)
    assert samples[("cadenza_records_consumed_total", labels("map"))] == 3
    assert samples[("cadenza_records_processed_total", labels("map"))] == 4
    assert samples[("cadenza_records_produced_total", labels("sink"))] == 2
    assert samples[("cadenza_records_late_total", labels("map"))] == 1
    assert samples[("cadenza_context_headers_missing_total", labels("map"))] == 4
    assert samples[("cadenza_context_headers_garbled_total", labels("map"))] == 1
    assert samples[("cadenza_records_dead_lettered_total", labels("map", reason="decode"))] == 2
    assert samples[("cadenza_records_dead_lettered_total", labels("map", reason="function"))] == 1

    run = "cadenza_run_time_seconds"
    assert samples[(f"{run}_bucket", labels("map", le="0.001"))] == 0
    assert samples[(f"{run}_bucket", labels("map", le="0.0025"))] == 2
    assert samples[(f"{run}_bucket", labels("map", le="0.25"))] == 2
    assert samples[(f"{run}_bucket", labels("map", le="0.5"))] == 3
    assert samples[(f"{run}_bucket", labels("map", le="+Inf"))] == 3
    assert samples[(f"{run}_count", labels("map"))] == 3
    assert samples[(f"{run}_sum", labels("map"))] == 0.002 + 0.002 + 0.5
    wait = "cadenza_queue_wait_seconds"
    assert samples[(f"{wait}_bucket", labels("map", le="0.00025"))] == 0
    assert samples[(f"{wait}_bucket", labels("map", le="0.0005"))] == 2
    assert samples[(f"{wait}_bucket", labels("map", le="0.1"))] == 3
    assert samples[(f"{wait}_sum", labels("map"))] == 0.0003 + 0.0003 + 0.07

    e2e = "cadenza_e2e_latency_seconds"
    assert samples[(f"{e2e}_bucket", labels("sink", le="0.025"))] == 0
    assert samples[(f"{e2e}_bucket", labels("sink", le="0.05"))] == 1
    assert samples[(f"{e2e}_bucket", labels("sink", le="2.5"))] == 2
    assert samples[(f"{e2e}_count", labels("sink"))] == 2
    assert samples[("cadenza_deadlines_met_total", labels("sink"))] == 1
    assert samples[("cadenza_deadlines_missed_total", labels("sink"))] == 1
    # Sink-only series are not exported for operators that are not sinks.
    assert ("cadenza_deadlines_met_total", labels("map")) not in samples
    assert (f"{e2e}_count", labels("map")) not in samples

    assert samples[("cadenza_buffered_records", frozenset())] == 42
    assert samples[("cadenza_paused_partitions", frozenset())] == 1


def test_span_emitter_counts_are_exported(exporter: PrometheusExporter, server: MetricsServer) -> None:
    sink = ListSink()
    emitter = SpanEmitter(sink, worker_id="w", batch_size=2, linger=60.0, max_buffered=2)
    exporter.track_span_emitter(emitter)
    for trace in range(5):
        emitter.emit("ads", "clicks", "map", 0, trace, 0.0, 0.0, 1.0, 1.0, 2.0, False)
    emitter.poll()
    samples = scrape(server)
    assert samples[("cadenza_spans_produced_total", frozenset())] == 2
    assert samples[("cadenza_spans_dropped_total", frozenset({("reason", "buffer_full")}))] == 3
    assert samples[("cadenza_spans_dropped_total", frozenset({("reason", "delivery")}))] == 0


def test_probes(exporter: PrometheusExporter, server: MetricsServer) -> None:
    assert get(f"{server.url}/healthz")[0] == 200
    assert get(f"{server.url}/readyz")[0] == 503  # not ready until the worker says so
    exporter.health.ready = True
    assert get(f"{server.url}/readyz") == (200, "ok\n")
    exporter.health.live = False
    assert get(f"{server.url}/healthz")[0] == 503
    assert get(f"{server.url}/readyz")[0] == 503  # a broken worker is not ready either
    assert get(f"{server.url}/nope")[0] == 404


def test_each_response_carries_its_own_length(exporter: PrometheusExporter, server: MetricsServer) -> None:
    """A 404, a 503 and a 200 in turn, each read whole: a length left over from an earlier response
    (a shared header list) makes the next read fail with IncompleteRead."""
    assert get(f"{server.url}/nope")[0] == 404
    assert get(f"{server.url}/readyz") == (503, "unavailable\n")
    assert get(f"{server.url}/healthz") == (200, "ok\n")
    assert get(f"{server.url}/nope")[0] == 404
    assert get(f"{server.url}/healthz") == (200, "ok\n")


def test_binds_loopback_by_default(server: MetricsServer) -> None:
    assert server.host == "127.0.0.1" and server.port > 0


def test_each_exporter_has_its_own_registry() -> None:
    first, second = PrometheusExporter(), PrometheusExporter()
    first.operator("a", "p", "o").processed += 1
    assert b'operator="o"' in first.render()
    assert b'operator="o"' not in second.render()
    assert isinstance(first.registry, CollectorRegistry) and first.registry is not second.registry


def test_duplicate_and_misused_callbacks_are_refused(exporter: PrometheusExporter) -> None:
    exporter.register_callback(names.BUFFERED_RECORDS, lambda: 1)
    with pytest.raises(ValueError):
        exporter.register_callback(names.BUFFERED_RECORDS, lambda: 2)
    with pytest.raises(ValueError):
        exporter.register_callback(names.RECORDS_PROCESSED, lambda: 2)
    with pytest.raises(ValueError):
        exporter.register_callback(names.RUN_TIME, lambda: 2)


def test_a_broken_callback_does_not_break_the_scrape(exporter: PrometheusExporter) -> None:
    def broken() -> float:
        raise RuntimeError("boom")

    exporter.register_callback(names.BUFFERED_RECORDS, broken)
    exporter.register_callback(names.SPANS_DROPPED, lambda: {("a", "b"): 1})  # wrong label count
    exporter.operator("a", "p", "o").processed += 1
    text = exporter.render().decode()
    assert 'cadenza_records_processed_total{operator="o",pipeline="p",tenant="a"} 1.0' in text


def test_histogram_cumulative_buckets() -> None:
    histogram = LatencyHistogram((0.1, 1.0))
    for value in (0.05, 0.1, 0.5, 3.0):
        histogram.observe(value)
    buckets, total = histogram.cumulative()
    assert buckets == [("0.1", 2.0), ("1.0", 3.0), ("+Inf", 4.0)]
    assert total == 0.05 + 0.1 + 0.5 + 3.0
    assert histogram.count == 4
