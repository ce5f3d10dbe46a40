"""S1's plot (``s1.png``, which ``cadenza demo`` and ``cadenza bench s1`` both write): latency CDFs,
deadline-met bars, the p99 of each stage and the load each phase ran at."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cadenza.demo.s1_config import S1Config
from cadenza.demo.s1_results import median_run
from cadenza.demo.worker_metrics import STAGES


def plot(runs: dict[str, list[dict[str, Any]]], config: S1Config, path: Path) -> None:
    """The latency CDFs and deadline bars; skipped, saying why, where matplotlib is not installed."""
    try:
        import matplotlib  # noqa: PLC0415
    except ImportError:
        print(f"no plot at {path}: matplotlib is not installed (pip install 'cadenza[demo]')")
        return

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    systems = [s for s in runs if runs[s]]
    fig, grid = plt.subplots(2, 3, figsize=(17, 10))
    axes = grid[0]
    for ax, tenant, target in ((axes[0], "LS", config.ls_target), (axes[1], "BA", config.ba_target)):
        for system in systems:
            latencies = sorted(runs[system][len(runs[system]) // 2][tenant]["latencies_ms"])
            if latencies:
                ys = [(i + 1) / len(latencies) for i in range(len(latencies))]
                ax.plot(latencies, ys, label=system, drawstyle="steps-post")
        ax.axvline(target * 1000, color="grey", linestyle="--", label="target")
        ax.set_xscale("log")
        ax.set_xlabel("latency (ms, log)")
        ax.set_ylabel("share of results")
        ax.set_title(f"{tenant}: latency CDF")
        ax.legend(fontsize=8)
    width = 0.38
    xs = range(len(systems))
    for offset, tenant in ((-width / 2, "LS"), (width / 2, "BA")):
        values = [median_run(runs[s])[tenant]["deadline_met_ratio"] or 0.0 for s in systems]
        axes[2].bar([x + offset for x in xs], values, width, label=tenant)
    axes[2].set_xticks(list(xs), systems)
    axes[2].set_ylim(0, 1.05)
    axes[2].set_title("deadline met (share of expected results)")
    axes[2].legend()
    merged = {system: median_run(runs[system]) for system in systems}
    plot_stages(grid[1][0], merged, "LS")
    plot_stages(grid[1][1], merged, "BA")
    plot_loads(grid[1][2], runs, config)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"wrote {path}")


def plot_stages(ax: Any, merged: dict[str, dict[str, Any]], tenant: str) -> None:
    """Per system, a bar stacking the p99 of each stage of ``tenant``, with its end-to-end p99 marked.

    p99s do not add up exactly (the slowest records of one stage are not those of the next), so the
    stack shows where the tail is spent, not the end-to-end p99: that is the black tick.
    """
    palette = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860")
    colors = dict(zip(STAGES, palette, strict=True))
    shown: set[str] = set()
    for x, entry in enumerate(merged.values()):
        bottom = 0.0
        for stage, values in entry[tenant].get("stages", {}).items():
            height = values.get("p99_ms") or 0.0
            ax.bar(
                x, height, 0.6, bottom=bottom, color=colors[stage], label=None if stage in shown else stage
            )
            shown.add(stage)
            bottom += height
        e2e = entry[tenant].get("p99_ms")
        if e2e is not None:
            ax.plot([x - 0.35, x + 0.35], [e2e, e2e], color="black", linewidth=2)
    ax.set_xticks(range(len(merged)), list(merged))
    ax.set_ylabel("ms")
    ax.set_title(f"{tenant}: p99 of each stage, stacked (black: end-to-end p99)")
    if shown:
        ax.legend(fontsize=8)


def plot_loads(ax: Any, runs: dict[str, list[dict[str, Any]]], config: S1Config) -> None:
    """The load each phase actually ran at; red: more than 10% off the load asked for (``off_load``)."""
    systems = [s for s in runs if runs[s]]
    for x, system in enumerate(systems):
        for entry in runs[system]:
            load = entry.get("load", {})
            if load.get("actual") is not None:
                ax.scatter(x, load["actual"], color="red" if load["off_load"] else "black")
    ax.axhline(config.load, color="grey", linestyle="--", label="requested")
    ax.set_xticks(range(len(systems)), systems)
    ax.set_title("BA load per phase (the asked load on the capacity the phase had)")
    ax.legend(fontsize=8)
