"""The dashboard in a real browser: embedded broker, a worker running S1's two tenants, headless Chromium.

LS is given a latency target no window result can meet (0.5 ms after the window's close), BA a
generous one, so the page must mark exactly LS as missing its deadline. Skips, with the reason, when
Playwright or Debian's ``chromium`` is not installed (``.ci/run`` installs chromium where it can).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import cadenza.demo
from cadenza.dashboard import Dashboard, WorkerSnapshot, parse_exposition, serve_dashboard
from cadenza.infra.kafka.clients import make_producer
from cadenza.infra.metrics.prometheus import PrometheusExporter
from cadenza.pipelines import load_pipelines
from cadenza.settings import KafkaSettings
from cadenza.worker import Worker
from cadenza.worker.config import WorkerConfig
from cadenza.worker.parts import WorkerParts
from tests.dashboard.test_lessees import Step, exposition
from tests.worker.kafka_io import running

playwright_sync = pytest.importorskip(
    "playwright.sync_api", reason="playwright is not installed (pip install playwright)"
)
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
if not Path(CHROMIUM).is_file():
    pytest.skip("Debian's chromium is not installed (apt-get install chromium)", allow_module_level=True)

# By path, not module name: each test loads it afresh with its own S1_* topics.
S1_PIPELINES = Path(cadenza.demo.__file__).resolve().parent / "s1_pipelines.py"


def closed_port() -> int:
    """A port nothing listens on: the dashboard must show that worker as down."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _feed(settings: KafkaSettings, ls_in: str, ba_in: str, stop: threading.Event) -> None:
    """Both tenants' input at a steady pace, event times = now, until ``stop``."""
    producer, _errors = make_producer(settings)
    n = 0
    while not stop.is_set():
        now = time.time()
        for user in range(8):
            value = {"user": f"u{user}", "page": "/home", "ts": now}
            producer.produce(ls_in, key=f"u{user}".encode(), value=json.dumps(value).encode())
        producer.produce(
            ba_in, key=str(n).encode(), value=json.dumps({"id": n, "payload": "x", "ts": now}).encode()
        )
        n += 1
        producer.poll(0)
        stop.wait(0.05)
    producer.flush(10)


@pytest.fixture
def s1_worker(kafka_settings: KafkaSettings, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A worker running S1's LS and BA (LS with an unmeetable target), fed continuously; yields its
    metrics address."""
    run = uuid.uuid4().hex[:8]
    topics = {
        name: f"dash-{name.lower().replace('_', '-')}-{run}"
        for name in ("LS_IN", "LS_OUT", "BA_IN", "BA_OUT")
    }
    for name, topic in topics.items():
        monkeypatch.setenv(f"S1_{name}", topic)
    monkeypatch.setenv("S1_RUN", f"dash-{run}")
    monkeypatch.setenv("S1_LS_TARGET", "0.0005")
    monkeypatch.setenv("S1_BA_TARGET", "30")
    monkeypatch.setenv("S1_CPU_ITERATIONS", "10")
    exporter = PrometheusExporter()
    server = exporter.start_http(0)
    worker = Worker(
        load_pipelines(S1_PIPELINES),
        kafka_settings,
        WorkerConfig(group=f"dash-{run}", partitions=2, watermark_idle_timeout=2.0),
        parts=WorkerParts(exporter=exporter),
    )
    stop = threading.Event()
    with running(worker):
        feeder = threading.Thread(
            target=_feed, args=(kafka_settings, topics["LS_IN"], topics["BA_IN"], stop), daemon=True
        )
        feeder.start()
        try:
            yield f"127.0.0.1:{server.port}"
        finally:
            stop.set()
            feeder.join(20)
    server.close()


def test_the_page_shows_both_tenants_live_and_marks_the_one_missing_its_deadline(
    s1_worker: str, tmp_path: Path
) -> None:
    dead = f"127.0.0.1:{closed_port()}"
    board = Dashboard([s1_worker, dead], window_s=5.0, stale_after_s=5.0)
    with serve_dashboard(board, port=0, interval_s=1.0) as server, playwright_sync.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 1600})
        errors: list[str] = []
        page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(server.url)

        ls = page.locator('tr.pipeline[data-tenant="LS"]')
        ba = page.locator('tr.pipeline[data-tenant="BA"]')
        # Window results need a closed window and a watermark past it: allow the group join and a few.
        page.wait_for_selector('tr.pipeline.missing[data-tenant="LS"]', timeout=90_000)
        page.wait_for_selector('tr.pipeline.ok[data-tenant="BA"]', timeout=60_000)
        assert "MISSING DEADLINE" in ls.inner_text()
        assert "meets deadline" in ba.inner_text()
        # The targets come from the worker's cadenza_latency_target_seconds: 0.5 ms and 30 s.
        assert ls.locator("td").nth(5).inner_text() == "0.5"
        assert ba.locator("td").nth(5).inner_text() == "30,000.0"
        # Buffered records and consumer lag per partition: both inputs' two partitions at least.
        assert page.locator("#partitions tbody tr").count() >= 4

        records_in = ba.locator("td").nth(8)
        first = float(records_in.inner_text().replace(",", ""))
        page.wait_for_timeout(3000)
        second = float(records_in.inner_text().replace(",", ""))
        assert second > first, "the page did not refresh between two reads"

        workers = page.locator("#workers tbody tr")
        assert workers.count() == 2
        assert workers.nth(0).locator("td").nth(1).inner_text() == "up"
        assert workers.nth(1).locator("td").nth(1).inner_text().startswith("down: no answer")
        assert page.locator("#stale").is_hidden()
        assert page.locator("#charts .uplot").count() >= 8  # four charts per pipeline, drawn by uPlot
        assert page.locator("#critical-path").inner_text() == "not available"

        shot = tmp_path / "dashboard.png"
        page.screenshot(path=str(shot), full_page=True)
        assert shot.stat().st_size > 0
        if target := os.environ.get("CADENZA_DASHBOARD_SCREENSHOT"):  # how docs/dashboard.png is made
            shutil.copyfile(shot, target)
        browser.close()
    assert not errors, f"browser console errors: {errors}"


def test_the_lessee_view_fills_in_and_draws_its_timeline() -> None:
    """No broker: the worker is exposition text whose counters grow with the time of the scrape."""
    start = time.time()

    def scrape(url: str, at: float) -> WorkerSnapshot:
        t = max(0.0, at - start)
        step = Step(
            held=3,
            leases=3,
            seconds=3 * t,
            handoff_seconds=0.00005 * 400 * t,  # 50 us for each of 400 calls a second
            handed_calls=400 * t,
            lessor_calls=100 * t,
        )
        return parse_exposition(exposition({("shop", "orders", "enrich"): step}), at)

    board = Dashboard(["w:1"], window_s=5.0, scraper=scrape)
    with serve_dashboard(board, port=0, interval_s=0.5) as server, playwright_sync.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 1600})
        errors: list[str] = []
        page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(server.url)
        page.wait_for_selector("#lessees-section:not([hidden])", timeout=20_000)
        cells = page.locator('#lessees tr.lessee[data-step="enrich"] td')
        page.wait_for_function(
            "() => document.querySelector('#lessees tr.lessee td:nth-child(14)').textContent !== '-'",
            timeout=20_000,
        )
        assert cells.nth(3).inner_text() == "3"
        assert cells.nth(12).inner_text() == "50.0"  # hand-off us per call
        assert cells.nth(13).inner_text() == "80.0%"  # 400 of every 500 calls on the lessees
        page.wait_for_selector("#lessee-charts .uplot", timeout=20_000)
        assert page.locator("#lessee-charts .uplot").count() == 1
        browser.close()
    assert not errors, f"browser console errors: {errors}"
