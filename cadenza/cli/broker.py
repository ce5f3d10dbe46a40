"""``cadenza broker``: run the embedded Kafka-compatible broker in the foreground or the background."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cadenza.cli.console import command_errors, console
from cadenza.cli.stop_signals import stop_on_signals
from cadenza.infra.broker.background import (
    background_status,
    default_state_dir,
    start_background,
    stop_background,
)
from cadenza.infra.broker.embedded import BrokerError, EmbeddedBroker

broker_app = typer.Typer(
    help="Run the embedded Kafka-compatible broker (Tansu, in memory; no Docker needed).",
    no_args_is_help=False,
    invoke_without_command=True,
)

StateDir = Annotated[
    Path | None,
    typer.Option(
        "--state-dir",
        help="Where the background broker's pid record and log live (default: $CADENZA_HOME or ~/.cadenza).",
    ),
]


@broker_app.callback()
@command_errors
def broker(
    ctx: typer.Context,
    port: Annotated[int | None, typer.Option(help="Port to listen on (default: a free one).")] = None,
    detach: Annotated[bool, typer.Option("--detach", help="Start in the background and return.")] = False,
    log_file: Annotated[
        Path | None, typer.Option(help="Broker log file (default: STATE_DIR/broker-foreground.log).")
    ] = None,
    state_dir: StateDir = None,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the broker to answer.")] = 30.0,
) -> None:
    """Start a broker; without a sub-command it runs in the foreground until Ctrl-C or SIGTERM."""
    if ctx.invoked_subcommand is not None:
        return
    directory = state_dir or default_state_dir()
    if detach:
        record = start_background(directory, port=port, timeout=timeout)
        console.print(
            f"broker running in the background at [bold]{record.bootstrap_servers}[/] "
            f"(pid {record.pid}, log {record.log_path})"
        )
        console.print(f"use it with: export CADENZA_BOOTSTRAP_SERVERS={record.bootstrap_servers}")
        console.print("stop it with: cadenza broker stop")
        return
    log_path = log_file or directory / "broker-foreground.log"
    with stop_on_signals() as stop, EmbeddedBroker(port=port, log_path=log_path) as running:
        console.print(f"broker ready at [bold]{running.bootstrap_servers}[/] (log {log_path})")
        console.print(f"use it with: export CADENZA_BOOTSTRAP_SERVERS={running.bootstrap_servers}")
        console.print("press Ctrl-C to stop")
        while not stop.wait(0.5):
            process = running.process
            if process is not None and process.poll() is not None:
                raise BrokerError(
                    f"the broker exited unexpectedly (code {process.returncode}); see {log_path}"
                )
        console.print("stopping the broker")


@broker_app.command("status")
@command_errors
def status(state_dir: StateDir = None) -> None:
    """Tell whether the background broker runs and answers."""
    result = background_status(state_dir or default_state_dir())
    if result.record is None or not result.running:
        console.print("no background broker is running")
        raise typer.Exit(1)
    answer = "answering" if result.answering else "[red]not answering[/]"
    console.print(
        f"background broker at [bold]{result.record.bootstrap_servers}[/] "
        f"(pid {result.record.pid}): {answer}; log {result.record.log_path}"
    )
    if not result.answering:
        raise typer.Exit(1)


@broker_app.command("stop")
@command_errors
def stop_command(state_dir: StateDir = None) -> None:
    """Stop the background broker."""
    record = stop_background(state_dir or default_state_dir())
    if record is None:
        console.print("no background broker was running")
        return
    console.print(f"stopped the background broker at {record.bootstrap_servers} (pid {record.pid})")
