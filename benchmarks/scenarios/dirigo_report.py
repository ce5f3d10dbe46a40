"""S6's summary over repetitions, the issue's targets, the table and the plot (``bench_dirigo.py``
runs, this reports)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dirigo_metrics import TENANTS

from cadenza.demo.s1_results import MET_GOAL, median_run

__all__ = ["check_targets", "format_table", "median_known", "ms_text", "percent_text", "plot", "summarise"]


#: Keys of a tenant's row whose median over the repetitions the summary carries beside
#: :func:`~cadenza.demo.s1_results.median_run`'s.
EXTRA_MEDIANS = (
    "lessor_calls",
    "handed_calls",
    "cpu_s",
    "run_s",
    "lessee_s",
    "handoff_ms",
    "input_rps",
    "leases",
    "timeouts",
    "deaths",
    "abandoned",
)


def median_known(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def summarise(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """A system's repetitions: per tenant the medians (with min and max satisfaction), the medians of
    its CPU and lessee seconds; the system's lessee seconds and the broker's and worker's cores."""
    merged = median_run([{t: e[t] for t in TENANTS} for e in entries], TENANTS)
    for tenant in TENANTS:
        row = merged[tenant]
        row.pop("latencies_ms", None)
        for key in EXTRA_MEDIANS:
            row[key] = median_known([e[tenant].get(key) for e in entries])
        row["satisfaction"] = [e[tenant]["deadline_met_ratio"] for e in entries]
    merged["BA"]["load"] = [e["BA"]["load"] for e in entries]
    for key in ("lessee_s", "broker_cores", "worker_cores"):
        merged[key] = median_known([e.get(key) for e in entries])
    merged["broker_cores_max"] = max(
        (e["broker_cores"] for e in entries if e.get("broker_cores") is not None), default=None
    )
    return merged


def _met(system: Mapping[str, Any] | None, tenant: str) -> float | None:
    return None if system is None else system[tenant].get("deadline_met_ratio")


def _gap(high: float | None, low: float | None) -> float | None:
    return None if high is None or low is None else round(high - low, 4)


def check_targets(result: Mapping[str, Any], goal: float = MET_GOAL) -> dict[str, dict[str, Any]]:
    """The issue's four checks on a result (``systems`` as :func:`summarise` makes them): each with the
    value it judged and ``met`` (None where a system it needs did not run or a figure is missing).

    - ``auto_satisfied``: under cameo-auto every tenant's median satisfaction is at least ``goal``,
    - ``without_lessees_fail``: where cameo without lessees leaves BA or IO below 0.9,
    - ``ls_every_repetition``: cameo-auto's LS is at least ``goal`` in every repetition (IO blocks),
    - ``lessee_seconds``: cameo-auto used at most 0.7x cameo-max's lessee seconds, with every
      tenant's satisfaction no more than 0.01 below cameo-max's.
    """
    systems = result.get("systems", {})
    auto, off, full = systems.get("cameo-auto"), systems.get("cameo"), systems.get("cameo-max")
    checks: dict[str, dict[str, Any]] = {}
    auto_ratios = {t: _met(auto, t) for t in TENANTS}
    checks["auto_satisfied"] = {
        "target": f"cameo-auto: every tenant >= {goal:g}",
        "value": auto_ratios,
        "met": None
        if auto is None or None in auto_ratios.values()
        else all(v >= goal for v in auto_ratios.values() if v is not None),
    }
    off_ratios = {t: _met(off, t) for t in ("BA", "IO")}
    checks["without_lessees_fail"] = {
        "target": "cameo without lessees: BA or IO < 0.9",
        "value": off_ratios,
        "met": None if off is None else any(v is not None and v < 0.9 for v in off_ratios.values()),
    }
    ls_runs = [] if auto is None else list(auto["LS"].get("satisfaction", []))
    checks["ls_every_repetition"] = {
        "target": f"cameo-auto: LS >= {goal:g} in every repetition",
        "value": ls_runs,
        "met": None if not ls_runs or None in ls_runs else all(v >= goal for v in ls_runs),
    }
    auto_s = None if auto is None else auto.get("lessee_s")
    full_s = None if full is None else full.get("lessee_s")
    ratio = round(auto_s / full_s, 3) if auto_s is not None and full_s else None
    gaps = {t: _gap(_met(full, t), _met(auto, t)) for t in TENANTS}
    close = None if None in gaps.values() else all(g is not None and g <= 0.01 for g in gaps.values())
    checks["lessee_seconds"] = {
        "target": "cameo-auto: lessee-seconds <= 0.7x cameo-max's, satisfaction within 0.01 of it",
        "value": {"ratio": ratio, "auto_s": auto_s, "max_s": full_s, "satisfaction_below_max": gaps},
        "met": None if ratio is None or close is None else ratio <= 0.7 and close,
    }
    return checks


# -- the table -------------------------------------------------------------------------------------


def ms_text(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def percent_text(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _cores(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _secs(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def format_table(result: Mapping[str, Any]) -> str:
    """Satisfaction and latency per tenant, then what each system used, then the issue's checks.

    BA's load is its mean input over one process's calibrated capacity, per repetition: the issue's
    terms (1.2 asked), and what a short phase's Pareto bursts actually brought.
    """
    systems: Mapping[str, Any] = result.get("systems", {})
    head = f"{'system':11s}" + "".join(f" {t + ' in target':>13s} {t + ' p50/p99 ms':>17s}" for t in TENANTS)
    lines = [head]
    for name, entry in systems.items():
        cells = "".join(
            f" {percent_text(entry[t]['deadline_met_ratio']):>13s} "
            f"{ms_text(entry[t]['p50_ms']) + '/' + ms_text(entry[t]['p99_ms']):>17s}"
            for t in TENANTS
        )
        lines.append(f"{name:11s}{cells}")
    lines.append("")
    lines.append(
        f"{'system':11s} {'CPU-s LS/BA/IO':>19s} {'lessee-s LS/BA/IO':>19s} {'lessee-s':>9s} "
        f"{'worker cores':>13s} {'broker cores':>13s} {'IO rps':>7s}  BA load (x one process)"
    )
    for name, entry in systems.items():
        cpu = "/".join(_secs(entry[t].get("cpu_s")) for t in TENANTS)
        lessee = "/".join(_secs(entry[t].get("lessee_s")) for t in TENANTS)
        loads = [
            load.get("mean_input_load") for load in entry["BA"].get("load", []) if isinstance(load, Mapping)
        ]
        lines.append(
            f"{name:11s} {cpu:>19s} {lessee:>19s} {_secs(entry.get('lessee_s')):>9s} "
            f"{_cores(entry.get('worker_cores')):>13s} {_cores(entry.get('broker_cores')):>13s} "
            f"{_secs(entry['IO'].get('input_rps')):>7s}  {', '.join(_cores(v) for v in loads) or '-'}"
        )
    checks = result.get("targets") or check_targets(result)
    lines.append("")
    for key, check in checks.items():
        word = {True: "MET", False: "MISSED", None: "NOT JUDGED"}[check["met"]]
        lines.append(f"{word:10s} {key}: {check['target']}; {_describe(check['value'])}")
    return "\n".join(lines)


def _describe(value: Any) -> str:
    if isinstance(value, Mapping):
        return ", ".join(f"{k} {_describe(v)}" for k, v in value.items())
    if isinstance(value, list):
        return "[" + ", ".join(_describe(v) for v in value) + "]"
    if isinstance(value, float):
        return f"{value:.3g}"
    return "-" if value is None else str(value)


# -- the plot --------------------------------------------------------------------------------------


def plot(result: Mapping[str, Any], runs: Mapping[str, list[dict[str, Any]]], path: Path) -> bool:
    """Per system (its first repetition), the lessees per step over time beside each tenant's
    latency over time, on one time axis, so a lease shows next to the latency it answered; below,
    satisfaction and lessee seconds per system. False, saying why, where there is nothing to plot."""
    try:
        import matplotlib  # noqa: PLC0415
    except ImportError:
        print(f"no plot at {path}: matplotlib is not installed")
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    shown = [name for name in runs if runs[name]]
    if not shown:
        print(f"no plot at {path}: no system ran to the end")
        return False
    fig, grid = plt.subplots(len(shown) + 1, 2, figsize=(15, 3.2 * (len(shown) + 1)), squeeze=False)
    colors = {"LS": "#4c72b0", "BA": "#dd8452", "IO": "#55a868"}
    for row, name in zip(grid, shown, strict=False):
        run = runs[name][0]
        row[1].sharex(row[0])
        leases = run.get("leases", {"t": [], "steps": {}})
        ax = row[0]
        for step, values in leases["steps"].items():
            ax.step(
                leases["t"],
                [math.nan if v is None else v for v in values],
                where="post",
                label=step,
                color=colors.get(step.split("/")[0]),
            )
        if not leases["steps"]:
            ax.text(
                0.5,
                0.5,
                "no lessees: both maps on the worker's thread (parallel=1)"
                if result["config"]["systems_spec"][name]["lessees"] == "off"
                else "no cadenza_lessees gauge exported",
                ha="center",
                va="center",
                transform=ax.transAxes,
            )
        ax.set_title(f"{name}: lessees per step (lessee-seconds {_secs(run.get('lessee_s'))})")
        ax.set_xlabel("s since the measured phase began")
        ax.set_ylabel("lessees")
        if leases["steps"]:
            ax.legend(fontsize=7)
        ax = row[1]
        for tenant in TENANTS:
            timeline = run[tenant].get("timeline", [])
            ax.plot(
                [r["t"] for r in timeline],
                [r["p99_ms"] for r in timeline],
                ".-",
                color=colors[tenant],
                markersize=3,
                label=f"{tenant} p99",
            )
            ax.axhline(run[tenant]["target_ms"], color=colors[tenant], linestyle=":", linewidth=1)
        ends = [r["t"] + 1.0 for t in TENANTS for r in run[t].get("timeline", [])]
        ax.set_xlim(min([0.0, *leases["t"]]), max([1.0, *ends, *leases["t"]]))
        ax.set_yscale("log")
        ax.set_title(f"{name}: latency p99 per second (dotted: targets)")
        ax.set_xlabel("s since the measured phase began")
        ax.set_ylabel("ms (log)")
        ax.legend(fontsize=7)
    systems = result["systems"]
    names = list(systems)
    width = 0.27
    ax = grid[-1][0]
    for offset, tenant in zip((-width, 0.0, width), TENANTS, strict=True):
        ax.bar(
            [x + offset for x in range(len(names))],
            [systems[n][tenant]["deadline_met_ratio"] or 0.0 for n in names],
            width,
            label=tenant,
            color=colors[tenant],
        )
    ax.axhline(MET_GOAL, color="grey", linestyle="--", linewidth=1)
    ax.set_xticks(range(len(names)), names)
    ax.set_ylim(0, 1.05)
    ax.set_title("satisfaction: share of expected results within target (median)")
    ax.legend(fontsize=7)
    ax = grid[-1][1]
    ax.bar(range(len(names)), [systems[n].get("lessee_s") or 0.0 for n in names], 0.6, color="#8172b3")
    ax.set_xticks(range(len(names)), names)
    ax.set_title("lessee-seconds while measured (median; 0: none exported)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True
