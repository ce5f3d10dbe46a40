"""S1 against every scheduling policy and faust-streaming: the harness of ``cadenza demo`` plus faust.

The harness (input plan, calibration, runs, measurement, plot) is :mod:`cadenza.demo.s1`, shipped in
the package because ``cadenza demo`` runs it; this script adds the faust-streaming peer, which runs
``peers/faust_s1.py`` (the same two pipelines) from a venv of its own, so it stays in the checkout.

    python benchmarks/scenarios/bench_s1.py --out DIR [--quick] [--systems fifo,cameo]
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cadenza.demo.s1 import (
    POLICIES,
    SIZINGS,
    PeerRun,
    Progress,
    S1Config,
    broker_settings,
    check_load,
    format_table,
    quick_config,
    sized,
)
from cadenza.demo.s1 import run_benchmark as run_s1

__all__ = [
    "POLICIES",
    "SIZINGS",
    "SYSTEMS",
    "S1Config",
    "broker_settings",
    "format_table",
    "quick_config",
    "run_benchmark",
    "sized",
]

SYSTEMS = (*POLICIES, "faust")
BENCH_DIR = Path(__file__).resolve().parent


def faust_command(run: PeerRun) -> list[str]:
    """The faust-streaming app of S1, run by the interpreter of its own venv (created on first use)."""
    from peers.venvs import FAUST, ensure_peer_env  # noqa: PLC0415

    python = ensure_peer_env(FAUST, progress=lambda line: None)
    (run.workdir / "faust-data").mkdir(parents=True, exist_ok=True)
    return [
        str(python),
        str(BENCH_DIR / "peers" / "faust_s1.py"),
        "--bootstrap",
        run.settings.bootstrap_servers,
        "--ls-input",
        run.topics.ls_in,
        "--ls-output",
        run.topics.ls_out,
        "--ba-input",
        run.topics.ba_in,
        "--ba-output",
        run.topics.ba_out,
        "--cpu-iterations",
        str(run.iterations),
        "--cpu-seconds",
        str(run.cpu_seconds or 0.0),
        "--partitions",
        str(run.partitions),
        "--app-id",
        f"s1-faust-{run.run}",
        "--workdir",
        str(run.workdir),
        "--fetch-max-wait-ms",
        "20",  # as cadenza's worker consumer: a parked fetch on the embedded broker costs the wait
    ]


def run_benchmark(
    out: Path, *, config: S1Config, bootstrap: str | None = None, progress: Progress = print
) -> dict[str, Any]:
    """:func:`cadenza.demo.s1.run_benchmark` with faust among the systems it can run."""
    return run_s1(out, config=config, bootstrap=bootstrap, progress=progress, peers={"faust": faust_command})


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
