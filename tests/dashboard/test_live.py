"""The dashboard's windowed numbers, down and stale workers, from real exporters' text (no broker)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from cadenza.dashboard import Dashboard, ScrapeError, WorkerSnapshot, parse_exposition, scrape_worker
from cadenza.dashboard.scrape import metrics_url
from cadenza.infra.metrics import names
from cadenza.infra.metrics.prometheus import PrometheusExporter
from cadenza.scheduling.clock import VirtualClock


class Pool:
    """Workers as real exporters; a URL without one does not answer."""

    def __init__(self) -> None:
        self.exporters: dict[str, PrometheusExporter] = {}

    def add(self, url: str, targets: dict[tuple[str, ...], float | int]) -> PrometheusExporter:
        exporter = self.exporters[url] = PrometheusExporter()
        exporter.register_callback(names.LATENCY_TARGET, lambda: targets)
        return exporter

    def scrape(self, url: str, at: float) -> WorkerSnapshot:
        if url not in self.exporters:
            raise ScrapeError("no answer: connection refused")
        return parse_exposition(self.exporters[url].render().decode(), at)


def results(exporter: PrometheusExporter, tenant: str, met: int, missed: int, latency: float) -> None:
    sink = exporter.operator(tenant, f"{tenant}-p", "sink", sink=True)
    for i in range(met + missed):
        sink.consumed += 1
        sink.record_run(0.001, 0.0005)
        sink.record_sink(latency, i < met)


def row(view: dict[str, Any], tenant: str) -> dict[str, Any]:
    rows = view["pipelines"]
    assert isinstance(rows, list)
    return next(r for r in rows if r["tenant"] == tenant)


def test_ratios_and_rates_are_over_the_window_and_summed_over_workers() -> None:
    clock, pool = VirtualClock(1000.0), Pool()
    a = pool.add("a:1", {("LS", "LS-p"): 0.05})
    b = pool.add("b:1", {("LS", "LS-p"): 0.05})
    board = Dashboard(["a:1", "b:1"], window_s=10.0, deadline_goal=0.9, clock=clock, scraper=pool.scrape)
    results(a, "LS", met=100, missed=0, latency=0.01)  # long ago: falls out of the window
    board.poll()
    for _ in range(12):
        clock.advance(1.0)
        board.poll()
    results(a, "LS", met=3, missed=1, latency=0.2)
    results(b, "LS", met=2, missed=4, latency=0.2)
    clock.advance(1.0)
    board.poll()
    view = board.view()
    ls = row(view, "LS")
    assert ls["met_ratio"] == pytest.approx(5 / 10)  # (3 + 2) met of (4 + 6) in the window
    assert ls["missing"] is True
    assert ls["target_ms"] == pytest.approx(50.0)
    assert ls["results_total"] == 110
    assert ls["throughput"] == pytest.approx(10 / 10.0)  # 10 records in the last 10 s of scrapes
    assert 100.0 < ls["p99_ms"] <= 250.0  # all in the 0.1..0.25 s bucket
    json.dumps(view, allow_nan=False)


def test_a_worker_that_does_not_answer_is_down_and_the_others_still_count() -> None:
    clock, pool = VirtualClock(0.0), Pool()
    results(pool.add("up:1", {("BA", "BA-p"): 5.0}), "BA", met=4, missed=0, latency=0.1)
    board = Dashboard(["up:1", "gone:1"], clock=clock, scraper=pool.scrape)
    board.poll()
    view = board.view()
    workers = {w["url"]: w for w in view["workers"]}
    assert workers["gone:1"]["status"] == "down"
    assert "connection refused" in workers["gone:1"]["error"]
    assert workers["up:1"]["status"] == "up"
    assert row(view, "BA")["met_ratio"] == 1.0
    assert row(view, "BA")["missing"] is False


def test_data_older_than_stale_after_is_flagged() -> None:
    clock, pool = VirtualClock(0.0), Pool()
    results(pool.add("w:1", {("BA", "BA-p"): 5.0}), "BA", met=1, missed=0, latency=0.1)
    board = Dashboard(["w:1"], stale_after_s=5.0, clock=clock, scraper=pool.scrape)
    board.poll()
    assert board.view()["stale"] is False
    clock.advance(6.0)  # no poll since: the poller is stuck or the process was suspended
    view = board.view()
    assert view["stale"] is True
    assert view["workers"][0]["status"] == "stale"
    (ba,) = view["pipelines"]  # its last numbers stay, flagged: not shown as current
    assert ba["stale"] is True and ba["met_ratio"] == 1.0 and ba["throughput"] is None
    del pool.exporters["w:1"]  # and now it does not answer at all
    board.poll()
    view = board.view()
    assert view["stale"] is False  # polling works again; the worker is what is down
    assert view["workers"][0]["status"] == "down"
    assert view["pipelines"][0]["stale"] is True
    assert view["history"][-1]["pipelines"] == {}  # no made-up point for the time it was down


def test_a_restarted_worker_counts_from_zero_not_negative() -> None:
    clock, pool = VirtualClock(0.0), Pool()
    results(pool.add("w:1", {("LS", "LS-p"): 0.05}), "LS", met=50, missed=50, latency=0.01)
    board = Dashboard(["w:1"], clock=clock, scraper=pool.scrape)
    board.poll()
    results(pool.add("w:1", {("LS", "LS-p"): 0.05}), "LS", met=3, missed=0, latency=0.01)  # fresh exporter
    clock.advance(1.0)
    board.poll()
    assert row(board.view(), "LS")["met_ratio"] == 1.0


def test_the_history_is_bounded() -> None:
    clock, pool = VirtualClock(0.0), Pool()
    pool.add("w:1", {})
    board = Dashboard(["w:1"], history=5, clock=clock, scraper=pool.scrape)
    for _ in range(20):
        board.poll()
        clock.advance(1.0)
    assert len(board.view()["history"]) == 5


def test_the_page_gets_only_the_points_it_has_not_drawn() -> None:
    clock, pool = VirtualClock(0.0), Pool()
    pool.add("w:1", {})
    board = Dashboard(["w:1"], clock=clock, scraper=pool.scrape)
    for _ in range(6):
        board.poll()
        clock.advance(1.0)
    assert [p["t"] for p in board.view()["history"]] == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert [p["t"] for p in board.view(since=3.0)["history"]] == [4.0, 5.0]
    assert board.view(since=5.0)["history"] == []


def test_parse_reads_the_worker_gauges() -> None:
    exporter = PrometheusExporter()
    exporter.register_callback(names.BUFFERED_RECORDS, lambda: 7)
    exporter.register_callback(names.PAUSED_PARTITIONS, lambda: 2)
    exporter.register_callback(names.CONSUMER_LAG, lambda: {("in", "0"): 12, ("in", "1"): 3})
    exporter.register_callback(names.PARTITION_BUFFERED_RECORDS, lambda: {("in", "0"): 5})
    exporter.operator("T", "p", "op").record_run(0.0, 0.25)
    snapshot = parse_exposition(exporter.render().decode(), 1.0)
    assert (snapshot.buffered, snapshot.paused) == (7, 2)
    assert snapshot.consumer_lag == {("in", 0): 12, ("in", 1): 3}
    assert snapshot.partition_buffered == {("in", 0): 5}
    assert snapshot.busy_seconds == pytest.approx(0.25)


def test_garbage_is_a_scrape_error_and_so_is_a_closed_port() -> None:
    with pytest.raises(ScrapeError, match="not a Prometheus exposition"):
        parse_exposition("this is { not metrics\n", 0.0)
    exporter = PrometheusExporter()
    server = exporter.start_http(0)
    try:
        assert scrape_worker(f"127.0.0.1:{server.port}", 0.0).pipelines == {}
        with pytest.raises(ScrapeError, match="HTTP 404"):
            scrape_worker(f"http://127.0.0.1:{server.port}/nothing-here", 0.0)
    finally:
        server.close()
    with pytest.raises(ScrapeError, match="no answer"):
        scrape_worker(f"127.0.0.1:{server.port}", 0.0, timeout=1.0)


def test_metrics_url() -> None:
    assert metrics_url("w:9464") == "http://w:9464/metrics"
    assert metrics_url("http://w:9464/") == "http://w:9464/metrics"
    assert metrics_url("https://w/custom") == "https://w/custom"


def test_bad_configuration_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one worker"):
        Dashboard([])
    with pytest.raises(ValueError, match="deadline_goal"):
        Dashboard(["w:1"], deadline_goal=1.5)


def test_a_bad_since_means_the_whole_history() -> None:
    from cadenza.dashboard.server import _since  # noqa: PLC0415 - the server's query parsing only

    assert _since("since=3.5") == 3.5
    assert _since("since=abc") is None
    assert _since("since=nan") is None
    assert _since("") is None
