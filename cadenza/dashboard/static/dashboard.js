// cadenza dashboard: polls /api/state every second, refreshes the tables, draws the history (uPlot).
"use strict";
(function () {
  const REFRESH_MS = 1000;
  const charts = new Map();
  let hist = []; // the points drawn so far; each poll adds the ones after the last
  let lastOk = Date.now();
  let staleAfterMs = 5000;

  const num = (v, digits = 1) =>
    v === null || v === undefined ? "-" : Number(v).toLocaleString("en", { minimumFractionDigits: digits, maximumFractionDigits: digits });
  const pct = (v) => (v === null || v === undefined ? "-" : (v * 100).toFixed(1) + "%");

  function row(tbody, cells, className, attrs) {
    const tr = document.createElement("tr");
    tr.className = className;
    for (const [k, v] of Object.entries(attrs || {})) tr.setAttribute(k, v);
    for (const text of cells) {
      const td = document.createElement("td");
      td.textContent = text;
      tr.appendChild(td);
    }
    tbody.appendChild(tr);
  }

  function renderPipelines(rows) {
    const tbody = document.querySelector("#pipelines tbody");
    tbody.replaceChildren();
    if (rows.length === 0) {
      row(tbody, ["no pipeline reported yet"], "");
      return;
    }
    for (const p of rows) {
      const state = p.stale ? "stale" : p.missing ? "missing" : p.met_ratio === null ? "idle" : "ok";
      const label = {
        stale: "stale: no worker reports it", missing: "MISSING DEADLINE", ok: "meets deadline", idle: "no results yet",
      }[state];
      row(tbody, [p.tenant, p.pipeline, pct(p.met_ratio), num(p.p50_ms), num(p.p99_ms), num(p.target_ms),
        num(p.queue_wait_p99_ms), num(p.throughput), num(p.consumed_total, 0), label],
        "pipeline " + state, { "data-tenant": p.tenant });
    }
  }

  function renderWorkers(rows) {
    const tbody = document.querySelector("#workers tbody");
    const parts = document.querySelector("#partitions tbody");
    tbody.replaceChildren();
    parts.replaceChildren();
    if (rows.length === 0) row(tbody, ["no worker announced yet"], "");
    for (const w of rows) {
      const status = w.error ? w.status + ": " + w.error : w.status;
      const name = w.worker_id ? w.url + " (" + w.worker_id + ")" : w.url;
      row(tbody, [name, status, pct(w.busy_share), num(w.buffered, 0), num(w.paused, 0), num(w.restarts, 0)],
        "worker " + w.status);
      for (const p of w.partitions || []) {
        row(parts, [w.url, p.topic, String(p.partition), num(p.buffered, 0), num(p.lag, 0)], "partition");
      }
    }
  }

  // Only steps declared with parallel= on a worker that exports cadenza_lessees: else no section.
  function renderLessees(rows) {
    document.getElementById("lessees-section").hidden = rows.length === 0;
    const tbody = document.querySelector("#lessees tbody");
    tbody.replaceChildren();
    for (const l of rows) {
      row(tbody, [l.tenant, l.pipeline, l.operator, num(l.held, 0), num(l.mean_held, 2), num(l.leases_rate, 2),
        num(l.releases_rate, 2), num(l.leases_total, 0), num(l.releases_total, 0), num(l.timeouts_total, 0),
        num(l.deaths_total, 0), num(l.abandoned_total, 0), num(l.handoff_us), pct(l.lessee_share)],
        l.trouble ? "lessee trouble" : "lessee", { "data-step": l.operator });
    }
  }

  function renderExtra(id, value) {
    const el = document.getElementById(id);
    el.replaceChildren();
    if (!value) {
      el.textContent = "not available";
      return;
    }
    const pre = document.createElement("pre");
    pre.textContent = JSON.stringify(value, null, 2);
    el.appendChild(pre);
  }

  function renderDiscovery(d) {
    const el = document.getElementById("discovery");
    el.hidden = !d;
    if (d) el.textContent = describeDiscovery(d);
  }

  const describeDiscovery = (d) =>
    "following " + d.topic + ": " + d.workers + " worker(s) announced, " + d.skipped + " record(s) skipped";

  // y: "ratio" (0..1), "log" (latencies spanning ms to a bulk tenant's seconds) or "linear".
  function chart(container, key, title, names, data, colors, y) {
    let entry = charts.get(key);
    if (entry === undefined) {
      const div = document.createElement("div");
      div.className = "chart";
      container.appendChild(div);
      const series = [{}].concat(names.map((n, i) => ({ label: n, stroke: colors[i], width: 2, spanGaps: false })));
      const yScale = y === "ratio" ? { range: [0, 1] } : y === "log" ? { distr: 3 } : {};
      const opts = {
        title: title, width: 420, height: 200, series: series, legend: { live: false },
        scales: { x: { time: true }, y: yScale }, axes: [{}, { size: 70 }],
      };
      const plot = new uPlot(opts, data, div);
      entry = { plot: plot };
      charts.set(key, entry);
    } else {
      entry.plot.setData(data);
    }
  }

  function drawHistory(view) {
    const lastT = hist.length ? hist[hist.length - 1].t : -Infinity;
    hist = hist.concat(view.history.filter((p) => p.t > lastT));
    if (hist.length > view.history_max) hist = hist.slice(hist.length - view.history_max);
    const xs = hist.map((p) => p.t);
    const pc = document.getElementById("charts");
    for (const p of view.pipelines) {
      const key = p.tenant + "/" + p.pipeline;
      const col = (field) => hist.map((pt) => (pt.pipelines[key] ? pt.pipelines[key][field] : null));
      chart(pc, key + ":ratio", p.tenant + " " + p.pipeline + ": deadline met", ["met"], [xs, col("met_ratio")],
        ["#2a7"], "ratio");
      chart(pc, key + ":latency", p.tenant + ": end-to-end latency (ms) vs target", ["p50", "p99", "target"],
        [xs, col("p50_ms"), col("p99_ms"), col("target_ms")], ["#36c", "#c33", "#999"], "log");
      chart(pc, key + ":queue", p.tenant + ": queue wait p99 (ms)", ["queue wait p99"], [xs, col("queue_wait_p99_ms")],
        ["#a6c"], "log");
      chart(pc, key + ":rate", p.tenant + ": records/s", ["records/s"], [xs, col("throughput")], ["#c80"], "linear");
    }
    const wc = document.getElementById("worker-charts");
    for (const w of view.workers) {
      const col = (field) => hist.map((pt) => (pt.workers[w.url] ? pt.workers[w.url][field] : null));
      const busy = col("busy_share");
      if (!charts.has(w.url + ":busy") && busy.every((v) => v === null)) continue; // never answered yet
      chart(wc, w.url + ":busy", w.url + ": busy share", ["busy"], [xs, busy], ["#2a7"], "ratio");
      chart(wc, w.url + ":buffer", w.url + ": buffered / paused partitions", ["buffered", "paused"],
        [xs, col("buffered"), col("paused")], ["#36c", "#c33"], "linear");
    }
    const lc = document.getElementById("lessee-charts");
    for (const l of view.lessees) {
      const key = l.tenant + "/" + l.pipeline + "/" + l.operator;
      const col = (field) => hist.map((pt) => (pt.lessees && pt.lessees[key] ? pt.lessees[key][field] : null));
      chart(lc, key + ":lessees", l.tenant + " " + l.pipeline + " " + l.operator + ": lessees held",
        ["now", "mean over window"], [xs, col("held"), col("mean_held")], ["#36c", "#c80"], "linear");
    }
  }

  function markStale(serverStale) {
    const stale = serverStale || Date.now() - lastOk > staleAfterMs;
    document.getElementById("stale").hidden = !stale;
    document.body.classList.toggle("is-stale", stale);
  }

  function update(view) {
    staleAfterMs = view.stale_after_s * 1000;
    renderPipelines(view.pipelines);
    renderWorkers(view.workers);
    renderLessees(view.lessees);
    renderExtra("critical-path", view.extras.critical_path);
    renderExtra("pool", view.extras.pool);
    renderExtra("true-rates", view.extras.true_rates);
    renderDiscovery(view.extras.discovery);
    drawHistory(view);
    const when = view.last_poll ? new Date(view.last_poll * 1000).toLocaleTimeString() : "never";
    document.getElementById("updated").textContent = "last scrape " + when + "; window " + view.window_s + " s";
    markStale(view.stale);
  }

  async function tick() {
    try {
      const since = hist.length ? "?since=" + hist[hist.length - 1].t : "";
      const response = await fetch("/api/state" + since, { cache: "no-store" });
      if (!response.ok) throw new Error("HTTP " + response.status);
      const view = await response.json();
      lastOk = Date.now();
      update(view);
    } catch (err) {
      markStale(true);
    } finally {
      setTimeout(tick, REFRESH_MS);
    }
  }

  update(JSON.parse(document.getElementById("initial-state").textContent));
  setTimeout(tick, REFRESH_MS);
})();
