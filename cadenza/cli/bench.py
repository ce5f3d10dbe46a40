"""``cadenza bench``: the benchmarks of the design, run from a source checkout.

The benchmark code lives in the repository's ``benchmarks/scenarios/`` directory, next to the peer
apps it runs in their own venvs, not in the installed package (it would drag matplotlib and the peers'
apps into every install). Each command here therefore finds that directory, puts it on ``sys.path``
and calls the benchmark module's ``run_benchmark``; a wheel install without the checkout gets a clear
error.
New benchmarks (``s1``, ``overhead``, ``migration``, ``dirigo``) follow the same pattern: load the module with
:func:`load_benchmark`, call it, print its table.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Annotated, Any

import typer

from cadenza.cli.console import command_errors, console
from cadenza.errors import CadenzaError

bench_app = typer.Typer(
    help="Benchmarks: cadenza against its peers on one broker (needs a source checkout).",
    no_args_is_help=True,
)

#: Overrides where the benchmarks directory is (default: ``benchmarks/`` of the checkout cadenza runs from).
BENCHMARKS_DIR_ENV = "CADENZA_BENCHMARKS_DIR"


#: The folder of ``benchmarks/`` that holds the scenarios ``cadenza bench`` runs (the one-off
#: investigations are in ``benchmarks/probes/``).
SCENARIOS = "scenarios"


def benchmarks_dir() -> Path:
    """The repository's ``benchmarks/`` directory, or a clear error if this is not a source checkout."""
    explicit = os.environ.get(BENCHMARKS_DIR_ENV)
    candidate = Path(explicit) if explicit else Path(__file__).resolve().parents[2] / "benchmarks"
    if not (candidate / SCENARIOS / "_common.py").is_file():
        raise CadenzaError(
            f"no benchmarks found at {candidate}: `cadenza bench` runs from a source checkout of cadenza "
            f"(git clone, then `pip install -e '.[dev]'`), or set {BENCHMARKS_DIR_ENV} to its benchmarks/"
        )
    return candidate


def load_benchmark(module: str) -> ModuleType:
    """Import ``benchmarks/scenarios/<module>.py`` (and make its siblings, ``_common`` and ``peers``,
    importable)."""
    directory = str(benchmarks_dir() / SCENARIOS)
    if directory not in sys.path:
        sys.path.insert(0, directory)
    return importlib.import_module(module)


def run_and_report(module: ModuleType, out: Path, **options: Any) -> dict[str, Any]:
    """Run ``module``'s benchmark with ``options``, its progress lines and then its table on the
    console; the result, for the command to judge."""
    result: dict[str, Any] = module.run_benchmark(
        out, progress=lambda line: console.print(line, highlight=False, markup=False), **options
    )
    console.print(module.format_table(result), highlight=False, markup=False)
    return result


QuickOption = Annotated[
    bool, typer.Option("--quick", help="One repetition of a smaller input: a few minutes at most.")
]
BootstrapOption = Annotated[
    str | None,
    typer.Option(help="host:port of an existing broker; default: start the embedded one and stop it after."),
]
OutOption = Annotated[Path, typer.Option(help="Directory for the JSON result, the plot and the run logs.")]


WorkloadOption = Annotated[
    str,
    typer.Option(
        help="map: parse -> map -> produce (with a raw loop as the ceiling); windowed: a count per key "
        "in 1 s tumbling event-time windows (cadenza, faust, quixstreams; every count checked)."
    ),
]


@bench_app.command("throughput")
@command_errors
def throughput(
    out: OutOption,
    quick: QuickOption = False,
    bootstrap: BootstrapOption = None,
    workload: WorkloadOption = "map",
) -> None:
    """Parse JSON -> map -> produce: cadenza (cameo) vs faust-streaming, quixstreams and a raw loop.

    Writes OUT/throughput.json and OUT/throughput.png (``--workload windowed``: the windowed count,
    OUT/throughput-windowed.json and .png). faust-streaming and quixstreams run from venvs of their
    own, created on first use under $CADENZA_HOME/bench-venvs (needs PyPI once).
    """
    module = load_benchmark("bench_throughput")
    if workload not in module.WORKLOADS:
        raise CadenzaError(f"unknown workload {workload!r}; known: {', '.join(module.WORKLOADS)}")
    try:
        result = run_and_report(module, out, quick=quick, bootstrap=bootstrap, workload=workload)
    except module.PeerInstallError as exc:
        raise CadenzaError(str(exc)) from None
    failed = [name for name, entry in result["systems"].items() if entry["rps"] is None]
    if failed:
        raise CadenzaError(f"no successful run for {', '.join(failed)}; see the logs in {out / 'logs'}")
    wrong = [name for name, entry in result["systems"].items() if entry.get("results_correct") is False]
    if wrong:
        raise CadenzaError(f"wrong window counts from {', '.join(wrong)}; see the runs in the JSON in {out}")


SystemsOption = Annotated[
    str,
    typer.Option(help="Comma-separated systems to run: fifo, edf, sjf, cameo, fair, faust."),
]


@bench_app.command("s1")
@command_errors
def s1(
    out: OutOption,
    quick: QuickOption = False,
    bootstrap: BootstrapOption = None,
    systems: SystemsOption = "fifo,edf,sjf,cameo,fair,faust",
    load: Annotated[
        float,
        typer.Option(
            help="BA's mean input as a fraction of the BA capacity calibrated on this machine "
            "(1.5: overload, BA must miss and LS must not)."
        ),
    ] = 0.75,
    sizing: Annotated[
        str,
        typer.Option(
            help="Record sizes for the same load: light (BA jobs of 1 ms, LS 300/s: S1 until "
            "2026-12-05) or heavy (BA jobs of 5 ms at a fifth of the rate, LS 100/s: what `cadenza "
            "demo` runs; the embedded broker takes a smaller share of the machine)."
        ),
    ] = "light",
) -> None:
    """Two tenants on one worker under Pareto bursts: each policy, and faust, on the same input.

    Writes OUT/s1.json (per system and tenant: p50/p95/p99, deadline-met ratio, throughput, time per
    stage; per repetition the load it actually ran at) and OUT/s1.png (latency CDFs, deadline-met
    bars, time per stage). faust runs from its own venv (created on first use).
    """
    module = load_benchmark("bench_s1")
    chosen = tuple(s.strip() for s in systems.split(",") if s.strip())
    unknown = sorted(set(chosen) - set(module.SYSTEMS))
    if unknown or not chosen:
        raise CadenzaError(f"unknown systems {unknown or chosen}; choose from {', '.join(module.SYSTEMS)}")
    try:
        module.check_load(load)
    except ValueError as exc:
        raise CadenzaError(str(exc)) from None
    if sizing not in module.SIZINGS:
        raise CadenzaError(f"unknown sizing {sizing!r}; choose from {', '.join(module.SIZINGS)}")
    config = (
        module.quick_config(sizing, systems=chosen, load=load)
        if quick
        else module.sized(sizing, systems=chosen, load=load)
    )
    run_and_report(module, out, config=config, bootstrap=bootstrap)


@bench_app.command("scaling")
@command_errors
def scaling(out: OutOption, quick: QuickOption = False, bootstrap: BootstrapOption = None) -> None:
    """S4: DS2 against a threshold autoscaler sizing real worker processes, from 1 and from too many.

    First a sweep of fixed pools finds the minimum sufficient pool per input rate. Writes
    OUT/scaling.json (the sweep; per run: workers, desired, input rate, lag and the LS tenant's
    latency over time, scaling actions, decisions to reach the minimum, time held; the issue's
    targets) and OUT/scaling.png. The full run takes about 50 minutes, --quick about 10.
    """
    module = load_benchmark("bench_scaling")
    config = module.quick_config() if quick else module.ScalingConfig()
    run_and_report(module, out, config=config, bootstrap=bootstrap)


@bench_app.command("overhead")
@command_errors
def overhead(out: OutOption, quick: QuickOption = False, bootstrap: BootstrapOption = None) -> None:
    """Saturation throughput of a no-op pipeline under cameo versus fifo, alternating runs.

    Writes OUT/overhead.json with fifo_rps, cameo_rps, overhead_ratio (1 - cameo/fifo) and every run,
    and produced_overhead_ratio: the same over the span of the outputs' produce timestamps.
    """
    module = load_benchmark("bench_overhead")
    run_and_report(module, out, quick=quick, bootstrap=bootstrap)


StrategiesOption = Annotated[
    str,
    typer.Option(
        help="Comma-separated migration strategies: all_at_once, cooperative, background, fluid, "
        "matching (an unknown name is skipped with a line saying so)."
    ),
]


@bench_app.command("migration")
@command_errors
def migration(
    out: OutOption,
    quick: QuickOption = False,
    bootstrap: BootstrapOption = None,
    strategies: StrategiesOption = "all_at_once,cooperative,fluid",
) -> None:
    """S5: a large keyed state and a live latency-sensitive tenant through 1 -> 2 -> 1 workers.

    Writes OUT/migration.json (per strategy: LS max and p99 latency and deadline-met ratio over the
    migration periods, their duration, whether the window results equal a brute force) and
    OUT/migration.png (LS latency over time, migrations shaded), once per migration strategy. Full
    mode holds a million keys.
    """
    module = load_benchmark("bench_migration")
    chosen = tuple(s.strip() for s in strategies.split(",") if s.strip())
    if not chosen:
        raise CadenzaError("no strategy given; choose from all_at_once, cooperative, fluid")
    config = module.quick_config(strategies=chosen) if quick else module.MigrationConfig(strategies=chosen)
    result = run_and_report(module, out, config=config, bootstrap=bootstrap)
    if not result["strategies"]:
        raise CadenzaError(f"no strategy ran to the end; see the logs in {out / 'logs'}")


@bench_app.command("dirigo")
@command_errors
def dirigo(
    out: OutOption,
    quick: QuickOption = False,
    bootstrap: BootstrapOption = None,
    systems: Annotated[
        str,
        typer.Option(
            help="Comma-separated systems: fifo and cameo (no lessees), cameo-auto (lessees by the "
            "scheduler's slack), cameo-max (the most lessees, always on)."
        ),
    ] = "fifo,cameo,cameo-auto,cameo-max",
    repetitions: Annotated[
        int | None, typer.Option(min=1, help="Runs of each system (default: 3; 1 with --quick).")
    ] = None,
) -> None:
    """S6: LS, a CPU-heavy BA map and a blocking IO map on one worker, with and without lessees.

    Writes OUT/dirigo.json (per system and tenant: the share within target, p50/p99, CPU- and
    lessee-seconds, the load it got; the broker's share of the cores; the issue's checks) and
    OUT/dirigo.png (the lessees per step over time beside each tenant's latency). The full run
    (3 repetitions of 4 systems) takes about 15 minutes on 2 cores, --quick about 3.
    """
    module = load_benchmark("bench_dirigo")
    try:
        chosen = module.parse_systems(systems)
    except ValueError as exc:
        raise CadenzaError(str(exc)) from None
    result = run_and_report(
        module, out, quick=quick, repetitions=repetitions, systems=chosen, bootstrap=bootstrap
    )
    if not result["systems"]:
        raise CadenzaError(f"no system ran to the end; see the logs in {out / 'logs'}")
