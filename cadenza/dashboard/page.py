"""The dashboard page, rendered on the server from the same JSON the page then polls.

The first paint needs no JavaScript: tenants, workers, lessees and their state are in the HTML.
``static/dashboard.js`` then refreshes the tables and draws the history with the vendored uPlot every
second. Values are escaped here and set with ``textContent`` there: tenant, pipeline, step and topic
names come from user code.
"""

from __future__ import annotations

import json
from html import escape
from typing import Any

__all__ = ["render_page"]

Json = dict[str, Any]


def _num(value: float | None, digits: int = 1, suffix: str = "") -> str:
    return "-" if value is None else f"{value:,.{digits}f}{suffix}"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


_STATES = {
    "stale": "stale: no worker reports it",
    "missing": "MISSING DEADLINE",
    "ok": "meets deadline",
    "idle": "no results yet",
}


def _state(row: Json) -> str:
    if row["stale"]:
        return "stale"
    if row["missing"]:
        return "missing"
    return "ok" if row["met_ratio"] is not None else "idle"


def _pipeline_row(row: Json) -> str:
    state = _state(row)
    cells = [
        escape(row["tenant"]),
        escape(row["pipeline"]),
        _ratio(row["met_ratio"]),
        _num(row["p50_ms"]),
        _num(row["p99_ms"]),
        _num(row["target_ms"]),
        _num(row["queue_wait_p99_ms"]),
        _num(row["throughput"]),
        _num(row["consumed_total"], 0),
        _STATES[state],
    ]
    tds = "".join(f"<td>{cell}</td>" for cell in cells)
    return f'<tr class="pipeline {state}" data-tenant="{escape(row["tenant"])}">{tds}</tr>'


def _worker_row(row: Json) -> str:
    busy = row.get("busy_share")
    name = row["url"] + (f" ({row['worker_id']})" if row.get("worker_id") else "")
    cells = [
        escape(name),
        escape(row["status"]) + (f": {escape(row['error'])}" if row.get("error") else ""),
        _ratio(busy),
        _num(row.get("buffered"), 0),
        _num(row.get("paused"), 0),
        _num(row.get("restarts"), 0),
    ]
    tds = "".join(f"<td>{cell}</td>" for cell in cells)
    return f'<tr class="worker {escape(row["status"])}">{tds}</tr>'


def _lessee_row(row: Json) -> str:
    cells = [
        escape(row["tenant"]),
        escape(row["pipeline"]),
        escape(row["operator"]),
        _num(row["held"], 0),
        _num(row["mean_held"], 2),
        _num(row["leases_rate"], 2),
        _num(row["releases_rate"], 2),
        _num(row["leases_total"], 0),
        _num(row["releases_total"], 0),
        _num(row["timeouts_total"], 0),
        _num(row["deaths_total"], 0),
        _num(row["abandoned_total"], 0),
        _num(row["handoff_us"]),
        _ratio(row["lessee_share"]),
    ]
    tds = "".join(f"<td>{cell}</td>" for cell in cells)
    trouble = " trouble" if row["trouble"] else ""
    return f'<tr class="lessee{trouble}" data-step="{escape(row["operator"])}">{tds}</tr>'


_PIPELINE_HEAD = (
    "tenant",
    "pipeline",
    "deadline met",
    "p50 ms",
    "p99 ms",
    "target ms",
    "queue wait p99 ms",
    "records/s",
    "records in",
    "state",
)
_LESSEE_HEAD = (
    "tenant",
    "pipeline",
    "step",
    "lessees now",
    "mean held",
    "leases/s",
    "releases/s",
    "leases",
    "releases",
    "timeouts",
    "deaths",
    "abandoned",
    "hand-off µs/call",
    "calls on lessees",
)
_WORKER_HEAD = ("worker", "status", "busy", "buffered", "paused partitions", "restarts")


def _head(columns: tuple[str, ...]) -> str:
    return "<tr>" + "".join(f"<th>{escape(c)}</th>" for c in columns) + "</tr>"


def render_page(view: Json) -> str:
    """The whole page for ``view`` (what :meth:`Dashboard.view` returns)."""
    pipelines = "".join(_pipeline_row(row) for row in view["pipelines"]) or (
        f'<tr><td colspan="{len(_PIPELINE_HEAD)}">no pipeline reported yet</td></tr>'
    )
    workers = "".join(_worker_row(row) for row in view["workers"]) or (
        f'<tr><td colspan="{len(_WORKER_HEAD)}">no worker announced yet</td></tr>'
    )
    lessees = "".join(_lessee_row(row) for row in view["lessees"])
    lessees_hidden = "" if lessees else " hidden"
    discovery = view.get("extras", {}).get("discovery")
    discovery_line = (
        f'<p id="discovery">following {escape(discovery["topic"])}: {discovery["workers"]} worker(s) '
        f"announced, {discovery['skipped']} record(s) skipped</p>"
        if discovery
        else '<p id="discovery" hidden></p>'
    )
    stale_hidden = "" if view["stale"] else " hidden"
    goal = _ratio(view["deadline_goal"])
    initial = json.dumps(view, allow_nan=False).replace("</", "<\\/")
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>cadenza dashboard</title>
<link rel="stylesheet" href="/static/uPlot.min.css">
<link rel="stylesheet" href="/static/dashboard.css">
</head>
<body>
<header>
  <h1>cadenza</h1>
  <span id="updated">window {view["window_s"]:g} s; a tenant below {goal} of deadlines met is marked</span>
  <div id="stale" class="banner"{stale_hidden}>data is stale: no fresh scrape for more than
    {view["stale_after_s"]:g} s</div>
</header>
<section>
  <h2>Tenants and pipelines</h2>
  <table id="pipelines"><thead>{_head(_PIPELINE_HEAD)}</thead><tbody>{pipelines}</tbody></table>
  <div id="charts"></div>
</section>
<section>
  <h2>Workers</h2>
  {discovery_line}
  <table id="workers"><thead>{_head(_WORKER_HEAD)}</thead><tbody>{workers}</tbody></table>
  <div id="worker-charts"></div>
  <h3>Partitions</h3>
  <table id="partitions"><thead>{_head(("worker", "topic", "partition", "buffered", "lag"))}</thead>
  <tbody></tbody></table>
</section>
<section id="lessees-section"{lessees_hidden}>
  <h2>Lessees</h2>
  <p>steps declared with <code>parallel=</code>: rates, hand-off and shares over the window; leases,
    releases, timeouts, deaths and abandoned threads since the workers started</p>
  <table id="lessees"><thead>{_head(_LESSEE_HEAD)}</thead><tbody>{lessees}</tbody></table>
  <div id="lessee-charts"></div>
</section>
<section>
  <h2>Critical path</h2>
  <div id="critical-path" class="extra">not available</div>
  <h2>Pool decisions</h2>
  <div id="pool" class="extra">not available</div>
  <h2>True rates</h2>
  <div id="true-rates" class="extra">not available</div>
</section>
<script id="initial-state" type="application/json">{initial}</script>
<script src="/static/uPlot.iife.min.js"></script>
<script src="/static/dashboard.js"></script>
</body>
</html>
"""
