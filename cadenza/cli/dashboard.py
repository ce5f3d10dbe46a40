"""``cadenza dashboard``: serve the live page of tenants, deadlines and workers until Ctrl-C.

The workers are named on the command line (``--worker``, repeatable: ``host:port`` of each worker's
``--metrics-port``), found on the discovery topic the workers announce themselves on
(``--discovery-topic``), or both; the feedback topic is read only when given, for the critical-path and pool
sections, which otherwise say "not available".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import typer

from cadenza.cli.console import command_errors, console
from cadenza.cli.stop_signals import stop_on_signals
from cadenza.dashboard import Dashboard, DiscoveryReader, FeedbackReader, serve_dashboard
from cadenza.settings import KafkaSettings


@command_errors
def dashboard_command(
    worker: Annotated[
        list[str] | None,
        typer.Option(
            "--worker",
            envvar="CADENZA_DASHBOARD_WORKERS",
            help="A worker's metrics endpoint (host:port or URL); repeat for each worker.",
        ),
    ] = None,
    discovery_topic: Annotated[
        str | None,
        typer.Option(
            envvar=["CADENZA_DASHBOARD_DISCOVERY_TOPIC", "CADENZA_DISCOVERY_TOPIC"],
            help="Follow the workers announced on this topic (cadenza worker --discovery-topic, "
            "default cadenza-workers): they appear and disappear without a restart.",
        ),
    ] = None,
    heartbeat_stale: Annotated[
        float,
        typer.Option(
            min=0.5, help="Seconds without an announcement before a discovered worker is shown stale."
        ),
    ] = 15.0,
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port of the page (0: any free one).")] = 8088,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    feedback_topic: Annotated[
        str | None,
        typer.Option(help="Feedback topic to read critical-path summaries and pool decisions from."),
    ] = None,
    interval: Annotated[
        float, typer.Option(min=0.1, max=2.0, help="Seconds between scrapes (the page refreshes as often).")
    ] = 1.0,
    window: Annotated[
        float, typer.Option(min=1.0, help="Seconds the ratios, quantiles and rates are computed over.")
    ] = 10.0,
    stale_after: Annotated[
        float, typer.Option(min=0.5, help="Seconds without a good scrape before data is flagged stale.")
    ] = 5.0,
    deadline_goal: Annotated[
        float,
        typer.Option(min=0.0, max=1.0, help="A tenant meeting fewer of its deadlines than this is marked."),
    ] = 0.99,
) -> None:
    """Serve a live web page of every tenant's deadlines, latency, queue wait and throughput, and of
    each worker's load, from the workers' Prometheus endpoints."""
    workers = worker or []
    if not workers and not discovery_topic:
        raise typer.BadParameter("name the workers (--worker host:port) or a --discovery-topic to follow")
    settings = KafkaSettings.load() if feedback_topic or discovery_topic else None
    reader = FeedbackReader(settings, feedback_topic) if settings is not None and feedback_topic else None
    found = (
        DiscoveryReader(settings, discovery_topic, heartbeat_stale_s=heartbeat_stale)
        if settings is not None and discovery_topic
        else None
    )
    board = Dashboard(
        workers,
        window_s=window,
        stale_after_s=stale_after,
        deadline_goal=deadline_goal,
        extras=_extras(reader, found) if reader is not None or found is not None else None,
        discovery=found.workers if found is not None else None,
    )
    server = serve_dashboard(board, host=host, port=port, interval_s=interval)
    source = f"{len(set(workers))} worker(s)" + (f" and those announced on {discovery_topic}" * bool(found))
    console.print(f"dashboard at [bold]{server.url}[/] for {source}; Ctrl-C stops it")
    try:
        with stop_on_signals() as stop:
            stop.wait()
    finally:
        console.print("stopping the dashboard")
        server.close()
        if reader is not None:
            reader.close()
        if found is not None:
            found.close()


def _extras(reader: FeedbackReader | None, found: DiscoveryReader | None) -> Callable[[], dict[str, Any]]:
    """The page's extra sections: the feedback topic's summaries and the discovery topic's state."""

    def extras() -> dict[str, Any]:
        sections = reader.extras() if reader is not None else {}
        if found is not None:
            sections["discovery"] = found.status()
        return sections

    return extras
