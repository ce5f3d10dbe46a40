"""S1 against every scheduling policy and faust-streaming: the harness of ``cadenza demo`` plus faust.

The harness (input plan, calibration, runs, measurement, plot) is :mod:`cadenza.demo.s1`, shipped in
the package because ``cadenza demo`` runs it; this script adds the peers (``s1_peers.py``: faust
runs ``peers/faust_s1.py``, the same two pipelines, from a venv of its own), the ``--load`` check and
the table ``cadenza bench s1`` prints, so they stay in the checkout.

    python benchmarks/scenarios/bench_s1.py --out DIR [--quick] [--systems fifo,cameo]
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from s1_peers import PEERS

from cadenza.demo.s1 import run_benchmark as run_s1
from cadenza.demo.s1_config import POLICIES, SIZINGS, Progress, S1Config, quick_config, sized
from cadenza.demo.s1_process import broker_with_pid
from cadenza.demo.s1_results import LOAD_TOLERANCE, MET_GOAL, met_phrase
from cadenza.settings import KafkaSettings

__all__ = [
    "POLICIES",
    "SIZINGS",
    "SYSTEMS",
    "S1Config",
    "broker_settings",
    "check_load",
    "format_table",
    "quick_config",
    "run_benchmark",
    "sized",
    "verdict",
]

SYSTEMS = (*POLICIES, *PEERS)


#: The ``--load`` range: below it the bursts hardly queue; above it BA's backlog outgrows the drain.
LOAD_RANGE = (0.05, 3.0)


def check_load(load: float) -> float:
    """``load`` if it is a sensible BA load, else a ``ValueError`` saying the range."""
    low, high = LOAD_RANGE
    if not math.isfinite(load) or not low <= load <= high:
        raise ValueError(
            f"--load {load:g} is outside {low:g}..{high:g} (BA's mean input as a fraction of its capacity)"
        )
    return load


@contextmanager
def broker_settings(bootstrap: str | None) -> Iterator[KafkaSettings]:
    with broker_with_pid(bootstrap) as (settings, _):
        yield settings


def verdict(row: dict[str, Any], goal: float = MET_GOAL) -> str:
    """One plain phrase on whether a tenant met its target: what a reader of a table wants first."""
    missing = row.get("results_expected", 0) - row.get("results", 0)
    return met_phrase(row.get("deadline_met_ratio"), row.get("target_ms", 0), missing, goal)


def format_table(result: dict[str, Any]) -> str:
    lines = [
        f"{'system':8s} {'LS p99 ms':>10s} {'LS met':>7s} {'BA p99 ms':>10s} {'BA met':>7s} {'BA rec/s':>9s} "
        f"{'LS wait p99 ms':>15s}  load per phase"
    ]
    off_load = False
    for system, entry in result["systems"].items():
        ls, ba = entry["LS"], entry["BA"]
        load = entry.get("load", {})
        cells = [
            ("-" if actual is None else f"{actual:.2f}") + (" OFF-LOAD" if off else "")
            for actual, off in zip(load.get("actual", []), load.get("off_load", []), strict=True)
        ]
        off_load = off_load or any(load.get("off_load", []))
        lines.append(
            f"{system:8s} {_fmt(ls['p99_ms']):>10s} {_ratio(ls['deadline_met_ratio']):>7s} "
            f"{_fmt(ba['p99_ms']):>10s} {_ratio(ba['deadline_met_ratio']):>7s} "
            f"{_fmt(ba['throughput_rps']):>9s} {_fmt(ls.get('queue_wait_p99_ms')):>15s}  "
            f"{', '.join(cells) or '-'}"
        )
    if off_load:
        lines.append(
            f"OFF-LOAD: BA's capacity in that phase was more than {LOAD_TOLERANCE:.0%} off the one "
            "calibrated (other processes took cores, the host's speed moved, or the policy's own cost "
            "per record took capacity): it did not run at the load asked for."
        )
    return "\n".join(lines)


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def run_benchmark(
    out: Path, *, config: S1Config, bootstrap: str | None = None, progress: Progress = print
) -> dict[str, Any]:
    """:func:`cadenza.demo.s1.run_benchmark` with the peers (faust) among the systems it can run."""
    return run_s1(out, config=config, bootstrap=bootstrap, progress=progress, peers=PEERS)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--bootstrap", default=None)
    parser.add_argument(
        "--load", type=float, default=S1Config.load, help="BA mean input over its calibrated capacity"
    )
    args = parser.parse_args(argv)
    try:
        check_load(args.load)
    except ValueError as exc:
        raise SystemExit(str(exc)) from None
    systems = tuple(s.strip() for s in args.systems.split(",") if s.strip())
    unknown = sorted(set(systems) - set(SYSTEMS))
    if unknown:
        raise SystemExit(f"unknown systems {unknown}; choose from {', '.join(SYSTEMS)}")
    config = (
        quick_config(systems=systems, load=args.load)
        if args.quick
        else S1Config(systems=systems, load=args.load)
    )
    result = run_benchmark(args.out, config=config, bootstrap=args.bootstrap)
    print(format_table(result))


if __name__ == "__main__":
    main()
