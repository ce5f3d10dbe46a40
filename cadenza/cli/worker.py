"""``cadenza worker``: run the pipelines of user modules until SIGINT or SIGTERM."""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType
from typing import Annotated

import typer

from cadenza.cli.console import command_errors, setup_logging
from cadenza.pipelines import Pipeline, load_pipelines
from cadenza.settings import KafkaSettings
from cadenza.worker import Worker


@command_errors
def worker_command(
    modules: Annotated[
        list[str], typer.Argument(help="Modules declaring pipelines: dotted names or .py file paths.")
    ],
    group: Annotated[str, typer.Option(help="Consumer group shared by the workers of a deployment.")] = (
        "cadenza-worker"
    ),
    partitions: Annotated[
        int, typer.Option(min=1, help="Partitions for source and sink topics the worker has to create.")
    ] = 4,
    batch_size: Annotated[
        int, typer.Option(min=1, help="Most records fetched and committed per batch.")
    ] = 1000,
    log_level: Annotated[
        str | None, typer.Option(help="Logging level (default: the global --log-level / CADENZA_LOG_LEVEL).")
    ] = None,
) -> None:
    """Run every pipeline of MODULES in one consumer group, until Ctrl-C or SIGTERM.

    On a signal the worker stops fetching, finishes the batch in flight (outputs flushed, offsets
    committed), leaves the group and exits 0. Connection settings come from CADENZA_* variables.
    """
    if log_level is not None:
        setup_logging(log_level)
    # A console script does not put the working directory on sys.path; users expect
    # `cadenza worker myapp.pipelines` to find their package from where they stand.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    settings = KafkaSettings.load()
    pipelines: list[Pipeline] = []
    for module in modules:
        pipelines.extend(load_pipelines(module))
    worker = Worker(pipelines, settings, group=group, partitions=partitions, batch_size=batch_size)

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        worker.stop()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        worker.start()
        # Plain writes, not rich: topic names are long and must not be re-wrapped to the terminal.
        _say(f"cadenza worker at {settings.bootstrap_servers}")
        _say(worker.describe())
        _say("running; Ctrl-C or SIGTERM stops")
        worker.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    counts = ", ".join(f"{name}={value}" for name, value in worker.counters.snapshot().items())
    _say(f"stopped: {counts}")


def _say(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()
