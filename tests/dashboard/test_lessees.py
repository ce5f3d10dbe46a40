"""The dashboard's lessee view, from exposition text written here (no worker, no broker).

The text is what a worker exports for steps declared with ``parallel=``; the numbers checked are the
ones the page derives from it: lessees held, their mean over the window, lease rates, the hand-off per
call (a ratio of two counters' growth) and the share of calls run on the lessees instead of the loop.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

import pytest

from cadenza.dashboard import Dashboard, ScrapeError, StepLessees, WorkerSnapshot, parse_exposition
from cadenza.dashboard.page import render_page
from cadenza.scheduling.clock import VirtualClock

EXPOSITION = """\
# HELP cadenza_lessees Lessees a parallel step holds now.
# TYPE cadenza_lessees gauge
cadenza_lessees{tenant="shop",pipeline="orders",operator="enrich"} 3.0
cadenza_lessees{tenant="shop",pipeline="orders",operator="score"} 0.0
cadenza_lessees{tenant="shop",pipeline="orders"} 9.0
# HELP cadenza_lessee_leases_total Lessees a parallel step leased.
# TYPE cadenza_lessee_leases_total counter
cadenza_lessee_leases_total{tenant="shop",pipeline="orders",operator="enrich"} 5.0
# HELP cadenza_lessee_releases_total Lessees a parallel step gave back idle.
# TYPE cadenza_lessee_releases_total counter
cadenza_lessee_releases_total{tenant="shop",pipeline="orders",operator="enrich"} 2.0
# HELP cadenza_lessee_seconds_total Seconds of lessees leased by a parallel step, summed over lessees.
# TYPE cadenza_lessee_seconds_total counter
cadenza_lessee_seconds_total{tenant="shop",pipeline="orders",operator="enrich"} 120.5
# HELP cadenza_lessee_timeouts_total Calls of a parallel step dead-lettered past their timeout.
# TYPE cadenza_lessee_timeouts_total counter
cadenza_lessee_timeouts_total{tenant="shop",pipeline="orders",operator="enrich"} 1.0
# HELP cadenza_lessee_deaths_total Lessee processes of a step that died mid-batch.
# TYPE cadenza_lessee_deaths_total counter
cadenza_lessee_deaths_total{tenant="shop",pipeline="orders",operator="enrich"} 0.0
# HELP cadenza_lessee_abandoned_total Thread lessees left in a call past its timeout.
# TYPE cadenza_lessee_abandoned_total counter
cadenza_lessee_abandoned_total{tenant="shop",pipeline="orders",operator="enrich"} 4.0
# HELP cadenza_lessee_handoff_seconds_total Seconds the worker's loop spent handing calls to lessees.
# TYPE cadenza_lessee_handoff_seconds_total counter
cadenza_lessee_handoff_seconds_total{tenant="shop",pipeline="orders",operator="enrich"} 0.25
# HELP cadenza_lessee_handed_calls_total Calls handed to lessees.
# TYPE cadenza_lessee_handed_calls_total counter
cadenza_lessee_handed_calls_total{tenant="shop",pipeline="orders",operator="enrich"} 5000.0
# HELP cadenza_lessor_calls_total Calls of a parallel step the worker's loop ran itself.
# TYPE cadenza_lessor_calls_total counter
cadenza_lessor_calls_total{tenant="shop",pipeline="orders",operator="enrich"} 700.0
# HELP cadenza_buffered_records Records fetched and not yet run.
# TYPE cadenza_buffered_records gauge
cadenza_buffered_records 12.0
"""


@dataclass
class Step:
    """One parallel step's series as a worker would export them (counters only grow)."""

    held: float = 0.0
    leases: float = 0.0
    releases: float = 0.0
    seconds: float = 0.0
    timeouts: float = 0.0
    deaths: float = 0.0
    abandoned: float = 0.0
    handoff_seconds: float = 0.0
    handed_calls: float = 0.0
    lessor_calls: float = 0.0


_NAMES = {
    "held": "cadenza_lessees",
    "leases": "cadenza_lessee_leases_total",
    "releases": "cadenza_lessee_releases_total",
    "seconds": "cadenza_lessee_seconds_total",
    "timeouts": "cadenza_lessee_timeouts_total",
    "deaths": "cadenza_lessee_deaths_total",
    "abandoned": "cadenza_lessee_abandoned_total",
    "handoff_seconds": "cadenza_lessee_handoff_seconds_total",
    "handed_calls": "cadenza_lessee_handed_calls_total",
    "lessor_calls": "cadenza_lessor_calls_total",
}


def exposition(steps: dict[tuple[str, str, str], Step]) -> str:
    """The text of one scrape of a worker running ``steps``, one family after another as exported."""
    lines = ["# TYPE cadenza_buffered_records gauge", "cadenza_buffered_records 0.0"]
    for field, name in _NAMES.items():
        family = name.removesuffix("_total")
        lines.append(f"# TYPE {family} {'gauge' if field == 'held' else 'counter'}")
        for (tenant, pipeline, operator), step in steps.items():
            labels = f'tenant="{tenant}",pipeline="{pipeline}",operator="{operator}"'
            lines.append(f"{name}{{{labels}}} {asdict(step)[field]!r}")
    return "\n".join(lines) + "\n"


class Workers:
    """Each URL answers the text set for it; a URL without text does not answer."""

    def __init__(self) -> None:
        self.texts: dict[str, str] = {}

    def scrape(self, url: str, at: float) -> WorkerSnapshot:
        if url not in self.texts:
            raise ScrapeError("no answer: connection refused")
        return parse_exposition(self.texts[url], at)


ENRICH = ("shop", "orders", "enrich")


def only_row(view: dict[str, Any]) -> dict[str, Any]:
    (row,) = view["lessees"]
    assert isinstance(row, dict)
    return row


def test_parse_keeps_each_steps_lessee_series_apart() -> None:
    snapshot = parse_exposition(EXPOSITION, 1.0)
    assert snapshot.lessees[ENRICH] == StepLessees(
        held=3.0,
        leases=5.0,
        releases=2.0,
        seconds=120.5,
        timeouts=1.0,
        deaths=0.0,
        abandoned=4.0,
        handoff_seconds=0.25,
        handed_calls=5000.0,
        lessor_calls=700.0,
    )
    assert snapshot.lessees[("shop", "orders", "score")] == StepLessees(held=0.0)
    assert len(snapshot.lessees) == 2  # the series without an operator label is no step
    assert snapshot.buffered == 12.0


def test_the_windowed_numbers_of_one_step() -> None:
    clock, workers = VirtualClock(0.0), Workers()
    board = Dashboard(["w:1"], window_s=10.0, clock=clock, scraper=workers.scrape)
    before = Step(2, leases=2, seconds=100, handoff_seconds=0.5, handed_calls=1000, lessor_calls=200)
    workers.texts["w:1"] = exposition({ENRICH: before})
    board.poll()
    clock.advance(10.0)
    after = Step(
        held=3,
        leases=4,
        releases=1,
        seconds=125,  # 25 lessee-seconds in 10 s: 2.5 lessees held on average
        handoff_seconds=0.524,  # 24 ms for 400 calls: 60 us each
        handed_calls=1400,
        lessor_calls=300,  # 400 calls on the lessees, 100 on the loop
    )
    workers.texts["w:1"] = exposition({ENRICH: after})
    board.poll()
    view = board.view()
    row = only_row(view)
    assert (row["tenant"], row["pipeline"], row["operator"]) == ENRICH
    assert row["held"] == 3
    assert row["mean_held"] == pytest.approx(2.5)
    assert row["leases_rate"] == pytest.approx(0.2)
    assert row["releases_rate"] == pytest.approx(0.1)
    assert (row["leases_total"], row["releases_total"]) == (4, 1)
    assert row["handoff_us"] == pytest.approx(60.0)
    assert row["lessee_share"] == pytest.approx(0.8)
    assert row["calls_window"] == 500
    assert row["trouble"] is False
    json.dumps(view, allow_nan=False)


def test_workers_running_the_same_step_add_up_before_dividing() -> None:
    clock, workers = VirtualClock(0.0), Workers()
    board = Dashboard(["a:1", "b:1"], window_s=10.0, clock=clock, scraper=workers.scrape)
    for url in ("a:1", "b:1"):
        workers.texts[url] = exposition({ENRICH: Step()})
    board.poll()
    clock.advance(10.0)
    # a: 100 calls at 100 us each; b: 900 calls at 20 us. Per call over both: 28 us, not 60.
    workers.texts["a:1"] = exposition({ENRICH: Step(2, seconds=20, handoff_seconds=0.01, handed_calls=100)})
    workers.texts["b:1"] = exposition(
        {ENRICH: Step(3, seconds=30, handoff_seconds=0.018, handed_calls=900, lessor_calls=1000)}
    )
    board.poll()
    row = only_row(board.view())
    assert row["held"] == 5
    assert row["mean_held"] == pytest.approx(5.0)
    assert row["handoff_us"] == pytest.approx(28.0)
    assert row["lessee_share"] == pytest.approx(0.5)


def test_no_calls_means_unknown_not_zero() -> None:
    clock, workers = VirtualClock(0.0), Workers()
    board = Dashboard(["w:1"], clock=clock, scraper=workers.scrape)
    workers.texts["w:1"] = exposition({ENRICH: Step(1, leases=1)})
    board.poll()
    clock.advance(1.0)
    board.poll()
    row = only_row(board.view())
    assert row["handoff_us"] is None and row["lessee_share"] is None
    assert row["mean_held"] == 0.0 and row["leases_rate"] == 0.0
    assert "<td>-</td><td>-</td></tr>" in render_page(board.view())  # hand-off and share shown as -


def test_one_scrape_has_no_rates_yet() -> None:
    clock, workers = VirtualClock(0.0), Workers()
    board = Dashboard(["w:1"], clock=clock, scraper=workers.scrape)
    workers.texts["w:1"] = exposition(
        {ENRICH: Step(1, leases=1, seconds=5, handed_calls=10, lessor_calls=10)}
    )
    board.poll()
    row = only_row(board.view())
    assert row["mean_held"] is None and row["leases_rate"] is None
    assert row["lessee_share"] == pytest.approx(0.5)  # the calls since the worker started


def test_timeouts_deaths_and_abandoned_threads_in_the_window_mark_the_step() -> None:
    clock, workers = VirtualClock(0.0), Workers()
    board = Dashboard(["w:1"], window_s=5.0, clock=clock, scraper=workers.scrape)
    workers.texts["w:1"] = exposition({ENRICH: Step(2, timeouts=3, abandoned=1)})
    board.poll()
    clock.advance(1.0)
    board.poll()
    row = only_row(board.view())
    assert row["trouble"] is False  # old ones: counted since the start, not in this window
    assert (row["timeouts_total"], row["abandoned_total"]) == (3, 1)
    workers.texts["w:1"] = exposition({ENRICH: Step(2, timeouts=3, deaths=1, abandoned=1)})
    clock.advance(1.0)
    board.poll()
    view = board.view()
    row = only_row(view)
    assert row["trouble"] is True
    assert (row["deaths_window"], row["deaths_total"], row["timeouts_window"]) == (1, 1, 0)
    assert '<tr class="lessee trouble" data-step="enrich">' in render_page(view)


def test_a_restarted_worker_counts_from_zero_not_negative() -> None:
    clock, workers = VirtualClock(0.0), Workers()
    board = Dashboard(["w:1"], clock=clock, scraper=workers.scrape)
    workers.texts["w:1"] = exposition({ENRICH: Step(4, leases=4, handoff_seconds=9.0, handed_calls=90_000)})
    board.poll()
    clock.advance(2.0)
    workers.texts["w:1"] = exposition({ENRICH: Step(1, leases=1, handoff_seconds=0.001, handed_calls=10)})
    board.poll()
    row = only_row(board.view())
    assert row["leases_rate"] == pytest.approx(0.5)
    assert row["handoff_us"] == pytest.approx(100.0)


def test_the_section_is_only_there_when_a_worker_exports_lessees() -> None:
    clock, workers = VirtualClock(0.0), Workers()
    board = Dashboard(["plain:1", "parallel:1"], clock=clock, scraper=workers.scrape)
    workers.texts["plain:1"] = exposition({})
    board.poll()
    view = board.view()
    assert view["lessees"] == []
    assert view["history"][-1]["lessees"] == {}
    assert '<section id="lessees-section" hidden>' in render_page(view)

    workers.texts["parallel:1"] = exposition({("shop", "orders", "<enrich>"): Step(2, seconds=4)})
    clock.advance(1.0)
    board.poll()
    view = board.view()
    page = render_page(view)
    assert '<section id="lessees-section">' in page
    assert 'data-step="&lt;enrich&gt;"' in page and "<enrich>" not in page.split('id="initial-state"')[0]
    assert "hand-off µs/call" in page

    del workers.texts["parallel:1"]  # down: its steps drop out with it
    clock.advance(1.0)
    board.poll()
    assert board.view()["lessees"] == []


def test_the_history_keeps_the_lessees_held() -> None:
    clock, workers = VirtualClock(0.0), Workers()
    board = Dashboard(["w:1"], window_s=10.0, clock=clock, scraper=workers.scrape)
    for t, held in enumerate((1, 2, 4)):
        workers.texts["w:1"] = exposition({ENRICH: Step(held, seconds=t * 2.0)})
        board.poll()
        clock.advance(1.0)
    points = [p["lessees"]["shop/orders/enrich"] for p in board.view()["history"]]
    assert [p["held"] for p in points] == [1, 2, 4]
    assert [p["mean_held"] for p in points] == [None, pytest.approx(2.0), pytest.approx(2.0)]
