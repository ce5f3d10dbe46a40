"""``cadenza generate``: seeded load for the example pipelines (clicks and orders), at a rate.

A thin shell over :mod:`cadenza.loadgen`: options become a :class:`~cadenza.loadgen.LoadPlan`, progress
is a bar at a terminal and one plain line every few seconds elsewhere (container logs), and SIGTERM or
Ctrl-C stop it cleanly (what was queued is flushed), which matters as PID 1 in a container where
SIGTERM is otherwise ignored.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from cadenza.cli.console import command_errors, console
from cadenza.cli.stop_signals import stop_on_signals
from cadenza.errors import ConfigError
from cadenza.loadgen import Bursts, LoadPlan, LoadStats, Stream, run_load
from cadenza.settings import KafkaSettings


def _describe(stats: LoadStats) -> str:
    per_topic = ", ".join(f"{topic}={n}" for topic, n in stats.queued.items()) or "nothing yet"
    return (
        f"sent {stats.total} ({per_topic}) in {stats.elapsed:.1f}s, {stats.rate:.0f}/s, "
        f"acked {stats.delivered}, at most {stats.behind * 1000:.0f} ms behind schedule"
    )


def _plain_progress(every: float) -> Callable[[LoadStats], None]:
    last = [-every]

    def report(stats: LoadStats) -> None:
        if stats.elapsed - last[0] >= every:
            last[0] = stats.elapsed
            sys.stdout.write(_describe(stats) + "\n")
            sys.stdout.flush()

    return report


@command_errors
def generate_command(
    clicks_rate: Annotated[
        float, typer.Option(min=0, help="Clicks per second (examples/clicks_per_user.py); 0: none.")
    ] = 200.0,
    orders_rate: Annotated[
        float, typer.Option(min=0, help="Orders per second (examples/bulk_enrich.py); 0: none.")
    ] = 20.0,
    duration: Annotated[
        float | None, typer.Option(min=0.001, help="Stop after this many seconds (default: never).")
    ] = None,
    count: Annotated[
        int | None, typer.Option(min=0, help="Stop after this many records in all (default: never).")
    ] = None,
    seed: Annotated[int, typer.Option(help="Same seed, same records at the same times.")] = 0,
    burst: Annotated[
        bool, typer.Option("--burst/--steady", help="Pareto-sized bursts (mean rate kept), or even spacing.")
    ] = False,
    burst_alpha: Annotated[float, typer.Option(help="Pareto shape of burst sizes; > 1.")] = 1.5,
    burst_mean: Annotated[
        float, typer.Option(help="Mean burst size, in seconds of traffic at the mean rate.")
    ] = 1.0,
    burst_peak: Annotated[
        float, typer.Option(help="Rate inside a burst, as a multiple of the mean rate.")
    ] = 10.0,
    users: Annotated[int, typer.Option(min=1, help="Distinct users of the clicks.")] = 50,
    customers: Annotated[int, typer.Option(min=1, help="Distinct customers of the orders.")] = 50,
    health_share: Annotated[
        float, typer.Option(min=0, max=1, help="Share of clicks on /health (filtered by the pipeline).")
    ] = 0.05,
    clicks_topic: Annotated[str, typer.Option(help="Topic of the clicks.")] = "clicks",
    orders_topic: Annotated[str, typer.Option(help="Topic of the orders.")] = "orders",
    partitions: Annotated[
        int, typer.Option(min=1, help="Partitions of a topic the generator has to create.")
    ] = 4,
    progress_every: Annotated[
        float, typer.Option(min=0.1, help="Seconds between progress lines when not at a terminal.")
    ] = 5.0,
) -> None:
    """Produce seeded clicks and orders for the examples at a rate, until --duration/--count or Ctrl-C.

    Connection settings come from CADENZA_* variables.
    """
    streams: list[Stream] = []
    if clicks_rate > 0:
        streams.append(Stream("clicks", clicks_rate, clicks_topic, keys=users, health_share=health_share))
    if orders_rate > 0:
        streams.append(Stream("orders", orders_rate, orders_topic, keys=customers))
    if not streams:
        raise ConfigError("both rates are 0: give --clicks-rate or --orders-rate above 0")
    bursts = Bursts(alpha=burst_alpha, mean_seconds=burst_mean, peak=burst_peak) if burst else None
    plan = LoadPlan(tuple(streams), seed=seed, bursts=bursts, duration=duration, count=count)
    settings = KafkaSettings.load()
    mode = "Pareto bursts" if bursts else "steady"
    rates = ", ".join(f"{s.kind} {s.rate:g}/s -> {s.topic}" for s in streams)
    sys.stdout.write(f"cadenza generate at {settings.bootstrap_servers}: {rates}, {mode}, seed {seed}\n")
    sys.stdout.flush()
    with stop_on_signals() as stop:
        if console.is_terminal:
            with Progress(
                TextColumn("[bold]generate"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[line]}"),
                TimeElapsedColumn(),
                console=console,
                transient=True,
            ) as bar:
                task = bar.add_task("generate", total=None, line="")

                def show(stats: LoadStats) -> None:
                    bar.update(task, completed=stats.total, total=stats.planned_total, line=_describe(stats))

                stats = run_load(settings, plan, partitions=partitions, stop=stop.is_set, on_progress=show)
        else:
            stats = run_load(
                settings,
                plan,
                partitions=partitions,
                stop=stop.is_set,
                on_progress=_plain_progress(progress_every),
            )
    sys.stdout.write(("stopped: " if stop.is_set() else "done: ") + _describe(stats) + "\n")
    sys.stdout.flush()
