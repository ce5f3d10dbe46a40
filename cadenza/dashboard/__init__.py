"""``cadenza dashboard``: a live web page of tenants, deadlines, workers and lessees, from their metrics.

Modules: :mod:`~cadenza.dashboard.scrape` reads a worker's Prometheus endpoint,
:mod:`~cadenza.dashboard.live` keeps the windowed numbers (quantiles from
:mod:`~cadenza.infra.metrics.quantiles`) and a bounded history, :mod:`~cadenza.dashboard.feedback`
follows the feedback topic, :mod:`~cadenza.dashboard.discovery` the workers' announcements,
:mod:`~cadenza.dashboard.page` renders the page and :mod:`~cadenza.dashboard.server` serves it
(standard library only; uPlot is vendored in ``static/``).
"""

from __future__ import annotations

from cadenza.dashboard.discovery import DiscoveredWorker, DiscoveredWorkers, DiscoveryReader
from cadenza.dashboard.feedback import FeedbackReader
from cadenza.dashboard.live import Dashboard
from cadenza.dashboard.scrape import (
    ScrapeError,
    StepLessees,
    WorkerSnapshot,
    parse_exposition,
    scrape_worker,
)
from cadenza.dashboard.server import DashboardServer, serve_dashboard
from cadenza.infra.metrics.quantiles import bucket_delta, histogram_quantile

__all__ = [
    "Dashboard",
    "DashboardServer",
    "DiscoveredWorker",
    "DiscoveredWorkers",
    "DiscoveryReader",
    "FeedbackReader",
    "ScrapeError",
    "StepLessees",
    "WorkerSnapshot",
    "bucket_delta",
    "histogram_quantile",
    "parse_exposition",
    "scrape_worker",
    "serve_dashboard",
]
