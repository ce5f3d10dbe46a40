"""``cadenza demo``: a short S1 (two tenants, bursts) under ``fifo`` and ``cameo``, side by side.

The harness ships in the package (:mod:`cadenza.demo`), so an installed cadenza runs the demo without
a source checkout; ``--smoke`` runs the worker-less broker round trip instead
(:mod:`cadenza.demo.smoke`). The S1 harness, the Spark feedback loop and the dashboard are imported
only when the demo runs, so other commands do not pay for them.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from cadenza.cli.console import command_errors, console
from cadenza.infra.broker.background import background_status, default_state_dir
from cadenza.infra.broker.embedded import EmbeddedBroker
from cadenza.settings import KafkaSettings


@contextlib.contextmanager
def _demo_cluster() -> Iterator[tuple[KafkaSettings, int | None]]:
    """An explicitly configured cluster, else the background broker, else a temporary embedded one;
    with the broker's pid when it is the one started here (the demo reports its CPU)."""
    if os.environ.get("CADENZA_BOOTSTRAP_SERVERS"):
        settings = KafkaSettings.load()
        console.print(f"using the cluster at {settings.bootstrap_servers} (CADENZA_BOOTSTRAP_SERVERS)")
        yield settings, None
        return
    status = background_status(default_state_dir())
    if status.answering and status.record is not None:
        console.print(f"using the background broker at {status.record.bootstrap_servers}")
        yield KafkaSettings.load(bootstrap_servers=status.record.bootstrap_servers), None
        return
    log_path = default_state_dir() / "demo-broker.log"
    with console.status("starting the embedded broker"), EmbeddedBroker(log_path=log_path) as broker:
        console.print(f"started a temporary embedded broker at {broker.bootstrap_servers} (log {log_path})")
        yield KafkaSettings.load(bootstrap_servers=broker.bootstrap_servers), broker.pid


@command_errors
def demo(
    out: Annotated[Path, typer.Option(help="Where the JSON results, the plot and logs go.")] = Path(
        "demo-results"
    ),
    duration: Annotated[
        float, typer.Option(min=5.0, max=600.0, help="Seconds of bursty input per phase (four phases).")
    ] = 12.0,
    smoke: Annotated[bool, typer.Option("--smoke", help="Only the worker-less broker round trip.")] = False,
    stats: Annotated[
        bool,
        typer.Option(help="Run the Spark stats job on the spans (if PySpark is installed)."),
    ] = True,
    records: Annotated[int, typer.Option(min=1, help="Records of the --smoke round trip.")] = 10_000,
    partitions: Annotated[int, typer.Option(min=1, help="Partitions of the --smoke topic.")] = 4,
    dashboard_port: Annotated[
        int,
        typer.Option(min=0, max=65535, help="Port of the live dashboard (0: any free one; busy: any)."),
    ] = 8088,
) -> None:
    """Two tenants share one worker; a bulk tenant bursts. Watch fifo miss the tight deadlines and
    cameo keep them, in four phases (fifo, cameo, cameo, fifo) on the same input. Prints every phase,
    then each policy's verdict over the phases that ran at the load asked for; writes OUT/s1.png."""
    if smoke:
        _smoke(records, partitions)
        return
    from cadenza.demo import feedback  # noqa: PLC0415 - the harness loads only when the demo runs
    from cadenza.demo import s1 as module  # noqa: PLC0415
    from cadenza.demo.s1_config import demo_config  # noqa: PLC0415
    from cadenza.demo.s1_process import free_port  # noqa: PLC0415

    with_stats = stats and feedback.spark_available()
    spans_topic = f"demo-spans-{uuid.uuid4().hex[:6]}" if with_stats else None
    metrics_port = free_port()
    config = demo_config(duration=duration, spans_topic=spans_topic, metrics_port=metrics_port)
    console.print(
        "[bold]cadenza demo[/]: tenant [cyan]LS[/] counts clicks per user in 1 s windows and wants each "
        f"count within {config.ls_target * 1000:.0f} ms of the window closing; tenant [cyan]BA[/] scores "
        f"jobs ({config.ba_cost_ms:g} ms of CPU each, in Pareto bursts) and has {config.ba_target:g} s. "
        "One worker process runs both, in four phases of the same input: fifo, cameo, cameo, fifo "
        "(mirrored, so neither policy always meets the machine later); a speed check before each phase "
        "keeps a BA job at its CPU cost while the host's speed moves."
    )
    say = lambda line: console.print(line, markup=False, highlight=False)  # noqa: E731
    rows: list[dict[str, Any]] = []
    with _demo_cluster() as (settings, broker_pid), _dashboard(f"127.0.0.1:{metrics_port}", dashboard_port):
        result = module.run_benchmark(
            out, config=config, bootstrap=settings.bootstrap_servers, progress=say, broker_pid=broker_pid
        )
        if spans_topic is not None:
            rows = feedback.run_feedback_loop(settings, spans_topic, progress=say)
    _print_results(result, config.load)
    if rows:
        _print_feedback(rows)
    elif stats:
        console.print("feedback loop skipped: PySpark is not installed (pip install 'cadenza[spark]')")
    plot = out / "s1.png"
    if not plot.is_file():
        plot_note = "no plot (matplotlib is not installed: pip install 'cadenza[demo]')"
    else:
        plot_note = f"plot: {plot}"
    console.print(f"{plot_note}; numbers: {out / 's1.json'}; worker logs: {out / 'logs'}")


def _print_results(result: dict[str, Any], requested_load: float) -> None:
    """Every phase as it ran, then each policy's verdict over its phases at the load asked for."""
    from cadenza.demo.phases import in_run_order, policy_result  # noqa: PLC0415 - loads with the demo
    from cadenza.demo.s1_results import LOAD_TOLERANCE  # noqa: PLC0415

    phases = Table(title="every phase, in the order it ran (same input for phases 1-2 and for 3-4)")
    columns = ("phase", "policy", "speed", "BA load", "LS met", "LS p99 ms", "BA met", "BA p99 ms", "broker")
    for column in columns:
        phases.add_column(column, justify="left" if column == "policy" else "right")
    notes: list[str] = []
    for system, phase in in_run_order(result["runs"]):
        load = phase.get("load", {})
        actual = load.get("actual")
        off = bool(load.get("off_load"))
        broker = phase.get("cpu", {}).get("broker_cores")
        speed = phase.get("speed", {}).get("relative")
        phases.add_row(
            str(phase.get("phase", "?")),
            system,
            "-" if speed is None else f"{speed:.0%}",
            ("-" if actual is None else f"{actual:.2f}") + (" [yellow]OFF[/]" if off else ""),
            _ratio(phase["LS"]["deadline_met_ratio"]),
            _num(phase["LS"]["p99_ms"]),
            _ratio(phase["BA"]["deadline_met_ratio"]),
            _num(phase["BA"]["p99_ms"]),
            "-" if broker is None else f"{broker:.2f} core",
        )
        if off:
            notes.append(
                f"phase {phase.get('phase')} ({system}) ran at BA load {actual:.2f}, not "
                f"{requested_load:.2f}: the capacity it had was more than {LOAD_TOLERANCE:.0%} off the "
                "calibrated one (the host's speed moved or other processes took cores); it is not "
                "counted as a result of the policy."
            )
        elif actual is None:
            notes.append(
                f"phase {phase.get('phase')} ({system}): no time per BA job from the worker and no burst "
                "that queued BA for a second, so its load "
                "could not be measured; it is counted."
            )
    console.print(phases)
    console.print(
        "speed: the machine's speed before the phase against the calibration's (this host switches "
        "between two speeds about 1.9x apart several times a second); BA load: the load asked for on "
        "the capacity the phase had, from BA's mean time per job against the calibration's; broker: "
        "the embedded broker's CPU while measured, in cores"
    )
    for note in notes:
        console.print(f"[yellow]{note}[/]")
    table = Table(title="verdict: each policy over its phases at the load asked for")
    for column in ("policy", "tenant", "target ms", "within target", "results", "phases", "target met?"):
        table.add_column(column, justify="left" if column in ("policy", "tenant", "target met?") else "right")
    for system, entries in result["runs"].items():
        pooled = policy_result(system, entries)
        for tenant in ("LS", "BA"):
            row = pooled.tenants[tenant]
            said = row.verdict() if pooled.counted else "no phase at the load asked for: no result"
            table.add_row(
                system,
                tenant,
                f"{row.target_ms:,}",
                f"{row.met:,}/{row.expected:,}",
                f"{row.results:,}",
                ", ".join(map(str, pooled.counted)) or "-",
                f"[green]{said}[/]" if said.startswith("MET") else f"[red]{said}[/]",
            )
    console.print(table)


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


@contextlib.contextmanager
def _dashboard(worker: str, port: int) -> Iterator[None]:
    """The live dashboard on the demo's worker while it runs (it shows the worker down between runs)."""
    from cadenza.dashboard import Dashboard, serve_dashboard  # noqa: PLC0415

    board = Dashboard([worker], window_s=5.0)
    try:
        server = serve_dashboard(board, port=port)
    except OSError:  # the port is taken (a dashboard already runs): any free one will do
        server = serve_dashboard(board, port=0)
    console.print(f"live dashboard while the demo runs: [bold]{server.url}[/]")
    try:
        yield
    finally:
        server.close()


def _print_feedback(rows: list[dict[str, Any]]) -> None:
    table = Table(title="feedback loop: the stats job's statistics from the workers' spans")
    for column in ("policy", "tenant", "step", "spans", "run p50 ms", "run p99 ms", "wait p99 ms", "cost ms"):
        table.add_column(column, justify="left" if column in ("policy", "tenant", "step") else "right")
    for row in rows:
        table.add_row(
            row["system"],
            row["tenant"],
            row["operator"],
            f"{row['spans']:,}",
            f"{row['run_time_p50_ms']:.3f}",
            f"{row['run_time_p99_ms']:.3f}",
            f"{row['queue_wait_p99_ms']:,.1f}",
            f"{row['estimate_before_ms']:.2f}->{row['estimate_after_ms']:.2f}",
        )
    console.print(table)
    console.print(
        "cost ms: the per-record estimate a worker holds before (the default) and after folding in the "
        "feedback, as a worker started with --feedback-topic does"
    )


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _smoke(records: int, partitions: int) -> None:
    from cadenza.demo.smoke import run_smoke  # noqa: PLC0415

    console.print(
        "[bold]cadenza demo --smoke[/]: a worker-less round trip through the broker (topics, headers, "
        "consumer groups, manual commits)."
    )
    with _demo_cluster() as (settings, _):
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, console=console) as progress:
            tasks = {
                "produce": progress.add_task("produce", total=records),
                "consume": progress.add_task("consume", total=records),
            }
            result = run_smoke(
                settings,
                records=records,
                partitions=partitions,
                progress=lambda stage, n: progress.advance(tasks[stage], n),
            )
    table = Table(title=f"smoke flow through topic {result.topic}")
    table.add_column("check")
    table.add_column("value", justify="right")
    table.add_row("records produced (acknowledged)", str(result.produced))
    table.add_row("records consumed", str(result.consumed))
    table.add_row("records with their header", str(result.headers_ok))
    table.add_row("produce rate (records/s)", f"{result.produced / max(result.produce_seconds, 1e-9):,.0f}")
    table.add_row(
        "consume rate incl. group join (records/s)",
        f"{result.consumed / max(result.consume_seconds, 1e-9):,.0f}",
    )
    table.add_row("committed offsets", ", ".join(f"p{p}={o}" for p, o in sorted(result.committed.items())))
    console.print(table)
    ok = result.produced == result.consumed == result.headers_ok == records
    ok = ok and sum(result.committed.values()) == records
    if not ok:
        console.print("[bold red]smoke flow FAILED[/]: counts differ")
        raise typer.Exit(1)
    console.print("[bold green]smoke flow OK[/]: every record and header came back; offsets committed.")
