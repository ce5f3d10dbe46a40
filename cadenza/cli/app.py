"""The root ``cadenza`` command; each sub-command lives in its own module."""

from __future__ import annotations

from typing import Annotated

import typer

from cadenza import __version__
from cadenza.cli.analyze import analyze_command
from cadenza.cli.bench import bench_app
from cadenza.cli.broker import broker_app
from cadenza.cli.console import console, setup_logging, user_errors
from cadenza.cli.dashboard import dashboard_command
from cadenza.cli.demo import demo
from cadenza.cli.describe import describe_command
from cadenza.cli.generate import generate_command
from cadenza.cli.health import health_command
from cadenza.cli.pool import pool_command
from cadenza.cli.spark_stage import spark_stage_command
from cadenza.cli.stats import stats_command
from cadenza.cli.worker import worker_command

app = typer.Typer(
    name="cadenza",
    help="cadenza: Kafka-native stream processing for Python that meets deadlines.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(broker_app, name="broker")
app.add_typer(bench_app, name="bench")
app.command("demo")(demo)
app.command("dashboard")(dashboard_command)
app.command("describe")(describe_command)
app.command("worker")(worker_command)
app.command("pool")(pool_command)
app.command("generate")(generate_command)
app.command("health")(health_command)
app.command("stats")(stats_command)
app.command("analyze")(analyze_command)
app.command("spark-stage")(spark_stage_command)


def _version(value: bool) -> None:
    if value:
        console.print(f"cadenza {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    log_level: Annotated[str, typer.Option(envvar="CADENZA_LOG_LEVEL", help="Logging level.")] = "WARNING",
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")
    ] = False,
) -> None:
    with user_errors():
        setup_logging(log_level)


def main() -> None:
    app()
