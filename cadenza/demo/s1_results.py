"""What S1 makes of a run's outputs, the same way for every system: what the measured phase must
produce, each tenant's latencies and deadline-met ratio, the load the phase actually ran at, the
median over repetitions and the one wording of a tenant's verdict. Pure: no broker, no process.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from cadenza.demo.s1_config import TENANTS, Capacity, S1Config
from cadenza.demo.s1_io import Output, Outputs, Send
from cadenza.demo.worker_metrics import STAGES
from cadenza.infra.metrics.quantiles import sample_quantile

#: A phase whose BA capacity differed from the calibrated one by more than this share is marked
#: ``off_load``: the load it ran at (the requested one, on the capacity it had) was more than 10% off
#: the load asked for, because other processes took cores, the host's speed moved, or the policy's
#: own cost per record took capacity. Its figures are then not a result of the policy.
LOAD_TOLERANCE = 0.10
#: BA is taken as running flat out while this many seconds of its calibrated capacity were waiting.
#: Not less: a job sent is fetchable only 0.2-1 s later on the embedded broker (the worker's fetch
#: stage), so at 0.25 s the first moments of a burst counted as busy while the worker still idled,
#: and phases read 10-20% below the capacity they had (a heavy-sizing phase: 154/s at 0.25 s, 184/s
#: at 0.75 s, 182/s calibrated; 2026-12-06).
SATURATED_BACKLOG_S = 0.75


def sustained_rate(
    sent: Sequence[float],
    done: Sequence[float],
    backlog: float,
    *,
    bin_s: float = 0.1,
    min_busy_s: float = 1.0,
) -> float | None:
    """Results per second while at least ``backlog`` jobs were waiting: what the system could run.

    ``sent`` and ``done`` are the send times and result times of one tenant's jobs. A time bin counts
    as busy when the backlog (sent minus done so far) is at least ``backlog`` at both of its edges, so
    the system had work queued for the whole bin and its output rate there is its capacity, not the
    input rate. None if fewer than ``min_busy_s`` seconds were busy (no burst ever exceeded capacity).
    """
    if not sent or not done or bin_s <= 0:
        return None
    sends, dones = sorted(sent), sorted(done)
    start, end = sends[0], max(sends[-1], dones[-1])
    edges = max(0, math.floor((end - start) / bin_s)) + 1
    busy_bins = 0
    finished = 0
    s_index = d_index = 0
    prev_backlog = None
    prev_done = 0
    for step in range(edges):
        edge = start + step * bin_s
        while s_index < len(sends) and sends[s_index] <= edge:
            s_index += 1
        while d_index < len(dones) and dones[d_index] <= edge:
            d_index += 1
        current = s_index - d_index
        if prev_backlog is not None and prev_backlog >= backlog and current >= backlog:
            busy_bins += 1
            finished += d_index - prev_done
        prev_backlog, prev_done = current, d_index
    if busy_bins * bin_s < min_busy_s:
        return None
    return finished / (busy_bins * bin_s)


def actual_load(  # noqa: PLR0917
    requested: float,
    input_rps: float,
    sustained_rps: float | None,
    calibrated_rps: float,
    run_s: float | None = None,
    calibrated_run_s: float | None = None,
) -> dict[str, Any]:
    """The load a phase ran at, and whether it was more than ``LOAD_TOLERANCE`` off the load asked for.

    ``actual`` is the requested load on the capacity the phase had. Where BA's mean seconds per job
    are known for the phase (``run_s``) and the calibration (``calibrated_run_s``), the capacity
    moved in their proportion: averaged over every job, this is precise, and it counts what the
    machine did (its speed, cores taken by other processes), not the policy. Otherwise it is the
    calibrated capacity over the one BA sustained during bursts (``output_load``, from the outputs
    alone, as for a peer system; it reads a few percent either way from phase to phase).

    It is judged on capacity, not on the input: a short phase's Pareto bursts bring more or less
    than the mean input, which is the input's doing (the same for every policy), not the
    machine's; that ratio is ``input_load``.
    """
    output_load = None if not sustained_rps else requested * calibrated_rps / sustained_rps
    run_load = requested * run_s / calibrated_run_s if run_s and calibrated_run_s else None
    actual = run_load if run_load is not None else output_load
    return {
        "requested": requested,
        "ba_input_rps": round(input_rps, 1),
        "ba_sustained_rps": None if sustained_rps is None else round(sustained_rps, 1),
        "ba_calibrated_rps": round(calibrated_rps, 1),
        "ba_run_ms": None if run_s is None else round(run_s * 1000, 3),
        "ba_calibrated_run_ms": None if calibrated_run_s is None else round(calibrated_run_s * 1000, 3),
        "actual": None if actual is None else round(actual, 3),
        "output_load": None if output_load is None else round(output_load, 3),
        "input_load": None if not sustained_rps else round(input_rps / sustained_rps, 3),
        "off_load": actual is not None and abs(actual / requested - 1.0) > LOAD_TOLERANCE,
    }


def tenant_stats(  # noqa: PLR0917
    latencies: list[float], expected: int, target: float, records: int, seconds: float, wrong: int = 0
) -> dict[str, Any]:
    """``latencies`` of correct results only; ``wrong`` results (a window count that misses records)
    count neither as met nor in the percentiles."""
    met = sum(1 for latency in latencies if latency <= target)
    return {
        "met": met,
        "p50_ms": _ms(sample_quantile(latencies, 0.50)),
        "p95_ms": _ms(sample_quantile(latencies, 0.95)),
        "p99_ms": _ms(sample_quantile(latencies, 0.99)),
        "deadline_met_ratio": round(met / expected, 4) if expected else None,
        "throughput_rps": round(records / seconds, 1) if seconds > 0 else None,
        "records": records,
        "results": len(latencies),
        "results_expected": expected,
        "wrong_results": wrong,
        "target_ms": round(target * 1000),
        "latencies_ms": [round(x * 1000, 2) for x in sorted(latencies)],
    }


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value * 1000, 2)


@dataclass
class Expectations:
    ls_windows: dict[tuple[str, float], int] = field(default_factory=dict)
    ba_ids: dict[int, float] = field(default_factory=dict)
    ls_records: int = 0


def expectations(stamped: Sequence[tuple[Send, float]], phase_start: float) -> Expectations:
    """What the measured phase must produce: LS windows it fills entirely, and every BA job."""
    expected = Expectations()
    last_ts = max(ts for _, ts in stamped)
    for send, ts in stamped:
        if send.tenant == "BA":
            expected.ba_ids[int(send.value["id"])] = ts
            continue
        if send.value["page"] == "/health":
            continue
        start = math.floor(ts)
        # Only windows that start inside the phase (no warm-up records in them) and close at least a
        # second before the input ends (later records exist to close them).
        if start >= phase_start and start + 2.0 <= last_ts:
            key = (send.key, float(start))
            expected.ls_windows[key] = expected.ls_windows.get(key, 0) + 1
            expected.ls_records += 1
    return expected


def measure(  # noqa: PLR0917
    system: str,
    config: S1Config,
    expected: Expectations,
    reader: Outputs,
    phase_start: float,
    phase_end: float,
    capacity: Capacity,
    *,
    ba_run_s: float | None = None,
) -> dict[str, Any]:
    """Per tenant, what the outputs say (see the module docstring); ``load``: the BA load the phase
    ran at, from BA's mean seconds per job (``ba_run_s``) against the calibration's where both are
    known, else from the output rate during bursts."""
    calibrated_rps = capacity.ba_rps
    ls = window_results(reader.ls, expected.ls_windows)
    ls_latencies = [latency for _, latency in ls.done]
    ba_done, ba_latencies = job_results(reader.ba, expected.ba_ids)
    seconds = phase_end - phase_start
    sustained = sustained_rate(list(expected.ba_ids.values()), ba_done, SATURATED_BACKLOG_S * calibrated_rps)
    input_seconds = max(expected.ba_ids.values(), default=phase_start) - phase_start
    load = actual_load(
        config.load,
        len(expected.ba_ids) / input_seconds if input_seconds > 0 else 0.0,
        sustained,
        calibrated_rps,
        run_s=ba_run_s,
        calibrated_run_s=capacity.ba_run_s,
    )
    return {
        "load": load,
        "LS": tenant_stats(
            ls_latencies, len(expected.ls_windows), config.ls_target, ls.records, seconds, ls.wrong
        ),
        "BA": tenant_stats(ba_latencies, len(expected.ba_ids), config.ba_target, len(ba_latencies), seconds),
    }


@dataclass
class WindowResults:
    """The window counts of a run that the measured phase expects: (arrival, latency) of each
    correct one, the records they counted, and how many counted fewer records than were sent."""

    done: list[tuple[float, float]] = field(default_factory=list)
    records: int = 0
    wrong: int = 0


def window_results(outputs: Sequence[Output], expected: dict[tuple[str, float], int]) -> WindowResults:
    """LS's results among ``outputs``: the first per expected (key, window); its latency runs from
    the window's end to its output's timestamp."""
    results = WindowResults()
    seen: set[tuple[str, float]] = set()
    for out in outputs:
        key = (str(out.value.get("key")), float(out.value.get("window_start", -1)))
        if key not in expected or key in seen:
            continue
        seen.add(key)
        count = int(out.value.get("value", 0))
        results.records += count
        if count != expected[key]:
            results.wrong += 1  # a window closed before all its records were counted
            continue
        results.done.append((out.timestamp, out.timestamp - float(out.value["window_end"])))
    return results


def matched_jobs(outputs: Sequence[Output], sent_at: dict[int, float]) -> list[tuple[Output, float]]:
    """The result of each job in ``sent_at`` (id -> the ``ts`` it was sent with) among ``outputs``,
    with that send time, in arrival order: a tenant whose outputs echo each input's ``id`` and ``ts``.

    Warm-up jobs reuse the measured phase's ids: only an output carrying this job's own send time is
    its result (taking the first output of an id matched warm-up outputs to measured jobs, with
    negative latencies).
    """
    matched: list[tuple[Output, float]] = []
    seen: set[int] = set()
    for out in outputs:
        job = int(out.value.get("id", -1))
        sent = sent_at.get(job)
        if sent is None or job in seen or abs(float(out.value.get("ts", -1.0)) - sent) > 1e-6:
            continue
        seen.add(job)
        matched.append((out, sent))
    return matched


def job_results(outputs: Sequence[Output], sent_at: dict[int, float]) -> tuple[list[float], list[float]]:
    """The result times and latencies of the jobs in ``sent_at`` (:func:`matched_jobs`)."""
    matched = matched_jobs(outputs, sent_at)
    return [out.timestamp for out, _ in matched], [out.timestamp - sent for out, sent in matched]


def strip_latencies(
    runs: dict[str, list[dict[str, Any]]], tenants: Sequence[str] = TENANTS
) -> dict[str, list[dict[str, Any]]]:
    return {
        system: [
            {
                t: {k: v for k, v in stats.items() if k != "latencies_ms"} if t in tenants else stats
                for t, stats in run.items()
            }
            for run in entries
        ]
        for system, entries in runs.items()
    }


def median_run(entries: list[dict[str, Any]], tenants: Sequence[str] = TENANTS) -> dict[str, Any]:
    """Per tenant, the median of each figure over the repetitions, with min and max of the met ratio."""
    merged: dict[str, Any] = {}
    for tenant in tenants:
        stats = [entry[tenant] for entry in entries]
        row: dict[str, Any] = {}
        for key in (
            "p50_ms",
            "p95_ms",
            "p99_ms",
            "deadline_met_ratio",
            "throughput_rps",
            "records",
            "results",
            "wrong_results",
        ):
            values = [s[key] for s in stats if s[key] is not None]
            row[key] = statistics.median(values) if values else None
        met = [s["deadline_met_ratio"] for s in stats if s["deadline_met_ratio"] is not None]
        row["deadline_met_min"] = min(met) if met else None
        row["deadline_met_max"] = max(met) if met else None
        row["results_expected"] = statistics.median(s["results_expected"] for s in stats)
        row["target_ms"] = stats[0]["target_ms"]
        row["latencies_ms"] = stats[len(stats) // 2]["latencies_ms"]
        for key in ("queue_wait_p50_ms", "queue_wait_p99_ms"):
            waits = [s[key] for s in stats if s.get(key) is not None]
            if waits:
                row[key] = statistics.median(waits)
        stages: dict[str, dict[str, float]] = {}
        for stage in STAGES:
            for key in ("p50_ms", "p99_ms"):
                values = [
                    s["stages"][stage][key]
                    for s in stats
                    if stage in s.get("stages", {}) and s["stages"][stage][key] is not None
                ]
                if values:
                    stages.setdefault(stage, {})[key] = statistics.median(values)
        if stages:
            row["stages"] = stages
        merged[tenant] = row
    loads = [entry["load"] for entry in entries if "load" in entry]
    if loads:
        merged["load"] = {
            "actual": [load["actual"] for load in loads],
            "off_load": [load["off_load"] for load in loads],
        }
    return merged


#: The share of expected results within target at which a tenant counts as having met its target
#: (the benchmark issue's goal).
MET_GOAL = 0.99


def met_phrase(
    ratio: float | None, target_ms: int, missing: float, goal: float = MET_GOAL, places: int = 0
) -> str:
    """``MET``/``MISSED`` with the share within ``target_ms`` (to ``places`` decimals of a percent), the
    goal and the results missing: the one wording of a tenant's verdict, per phase or pooled."""
    if ratio is None:
        return "no results expected"
    shown = f"{ratio:.{places}%}"
    if ratio >= goal:
        return f"MET: {shown} within {target_ms:,} ms"
    why = f", {missing:,.0f} missing" if missing > 0 else ""
    return f"MISSED: {shown} within {target_ms:,} ms (goal {goal:.0%}{why})"
