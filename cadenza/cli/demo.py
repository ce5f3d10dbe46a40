"""``cadenza demo``: for now, the honest worker-less smoke flow (see :mod:`cadenza.demo`)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from cadenza.cli.console import command_errors, console
from cadenza.demo import run_smoke
from cadenza.infra.broker.background import background_status, default_state_dir
from cadenza.infra.broker.embedded import EmbeddedBroker
from cadenza.settings import KafkaSettings


@contextlib.contextmanager
def _demo_cluster() -> Iterator[KafkaSettings]:
    """An explicitly configured cluster, else the background broker, else a temporary embedded one."""
    if os.environ.get("CADENZA_BOOTSTRAP_SERVERS"):
        settings = KafkaSettings.load()
        console.print(f"using the cluster at {settings.bootstrap_servers} (CADENZA_BOOTSTRAP_SERVERS)")
        yield settings
        return
    status = background_status(default_state_dir())
    if status.answering and status.record is not None:
        console.print(f"using the background broker at {status.record.bootstrap_servers}")
        yield KafkaSettings.load(bootstrap_servers=status.record.bootstrap_servers)
        return
    log_path = default_state_dir() / "demo-broker.log"
    with console.status("starting the embedded broker"), EmbeddedBroker(log_path=log_path) as broker:
        console.print(f"started a temporary embedded broker at {broker.bootstrap_servers} (log {log_path})")
        yield KafkaSettings.load(bootstrap_servers=broker.bootstrap_servers)


@command_errors
def demo(
    records: Annotated[int, typer.Option(min=1, help="Records to send through the broker.")] = 10_000,
    partitions: Annotated[int, typer.Option(min=1, help="Partitions of the demo topic.")] = 4,
) -> None:
    """Run the demo. Today: a smoke flow through a real broker (no worker or scheduler yet)."""
    console.print(
        "[bold]cadenza demo[/]: this is a [yellow]worker-less smoke flow[/]. It proves the broker and the "
        "Kafka layer (topics, headers, consumer groups, manual commits). The multi-tenant deadline demo "
        "replaces it once the worker and scheduler land."
    )
    with _demo_cluster() as settings:
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
