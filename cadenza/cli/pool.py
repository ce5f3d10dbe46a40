"""``cadenza pool``: run ``cadenza worker`` processes in one group, sized by the DS2 controller."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Annotated

import typer

from cadenza.cli.console import command_errors
from cadenza.cli.stop_signals import stop_on_signals
from cadenza.infra.metrics.server import MetricsServer
from cadenza.pipelines import PipelineGraph, load_pipelines
from cadenza.scaling.controller import ControllerSettings, PoolController
from cadenza.scaling.migration import STRATEGIES
from cadenza.scaling.observe import dataflow
from cadenza.scaling.pool import Pool, ServiceWorkers, WorkerProcesses
from cadenza.scheduling.clock import SystemClock
from cadenza.settings import KafkaSettings
from cadenza.worker.engine.topology import split


def resolve_migration(requested: str, graphs: Sequence[PipelineGraph], *, own_workers: bool) -> str:
    """``--migration``'s value for these pipelines: ``auto`` is ``fluid`` unless a pipeline has a join
    (plan ownership does not run joins yet) or the workers are not the pool's own (an HPA changes
    their replicas; the pool cannot move their partitions): then ``group``."""
    if requested not in ("auto", "group", *STRATEGIES):
        raise typer.BadParameter(
            f"--migration must be auto, group, {', '.join(STRATEGIES)}; got {requested!r}"
        )
    if requested == "auto":
        joins = any(node.kind == "join" for graph in graphs for node in graph.nodes)
        return "fluid" if own_workers and not joins else "group"
    if requested != "group" and not own_workers:
        raise typer.BadParameter("--migration other than group needs the pool's own workers")
    return requested


@command_errors
def pool_command(
    modules: Annotated[
        list[str], typer.Argument(help="Modules declaring pipelines: dotted names or .py file paths.")
    ],
    group: Annotated[str, typer.Option(envvar="CADENZA_GROUP", help="Consumer group of the workers.")],
    min_workers: Annotated[
        int, typer.Option("--min", min=1, envvar="CADENZA_POOL_MIN_WORKERS", help="Fewest workers.")
    ] = 1,
    max_workers: Annotated[
        int, typer.Option("--max", min=1, envvar="CADENZA_POOL_MAX_WORKERS", help="Most workers.")
    ] = 4,
    interval: Annotated[
        float,
        typer.Option(
            min=0.5,
            envvar="CADENZA_POOL_POLICY_INTERVAL_S",
            help="Seconds between decisions (also the workers' rate window).",
        ),
    ] = 10.0,
    feedback_topic: Annotated[
        str | None,
        typer.Option(envvar="CADENZA_FEEDBACK_TOPIC", help="Publish every decision on this topic."),
    ] = None,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=65535,
            envvar="CADENZA_POOL_METRICS_PORT",
            help="Serve the pool's /metrics (cadenza_pool_desired_workers, cadenza_pool_workers).",
        ),
    ] = None,
    metrics_host: Annotated[
        str, typer.Option(envvar="CADENZA_POOL_METRICS_HOST", help="Address the pool's metrics port binds.")
    ] = "127.0.0.1",
    worker_service: Annotated[
        str | None,
        typer.Option(
            envvar="CADENZA_POOL_WORKER_SERVICE",
            help="HOST:PORT of workers run elsewhere (a Kubernetes headless Service): observe and "
            "decide only; the HPA on cadenza_pool_desired_workers applies the decision.",
        ),
    ] = None,
    migration: Annotated[
        str,
        typer.Option(
            envvar="CADENZA_POOL_MIGRATION",
            help="How partitions move when the pool changes: fluid, matching or all (the workers run in "
            "plan ownership and the pool moves partitions warm, in those steps; see "
            "docs/concepts/scaling.md), group (the consumer group's rebalances), or auto: fluid, unless a "
            "pipeline has a join (not run under plan ownership yet) or the workers run elsewhere "
            "(--worker-service): group.",
        ),
    ] = "auto",
    worker_option: Annotated[
        list[str] | None,
        typer.Option(
            "--worker-option",
            help="An extra `cadenza worker` argument, e.g. --worker-option=--partitions=8 (repeatable).",
        ),
    ] = None,
) -> None:
    """Run MODULES' pipelines in a pool of worker processes that DS2 sizes between --min and --max.

    Other controller settings come from CADENZA_POOL_* (warm-up, activation and scale-down windows,
    utilisation target, over-provisioning); see docs/concepts/scaling.md.
    """
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    settings = KafkaSettings.load()
    controller_settings = ControllerSettings(
        min_workers=min_workers, max_workers=max_workers, policy_interval_s=interval
    )
    graphs = [pipeline.compile() for module in modules for pipeline in load_pipelines(module)]
    flow = dataflow((graph.name, split(graph)) for graph in graphs)
    clock = SystemClock()
    controller = PoolController(controller_settings, clock, workers=min_workers)
    processes: WorkerProcesses | ServiceWorkers
    migration = resolve_migration(migration, graphs, own_workers=worker_service is None)
    if worker_service is not None:
        host, _, port = worker_service.rpartition(":")
        if not host or not port.isdigit():
            raise typer.BadParameter(f"--worker-service must be HOST:PORT, got {worker_service!r}")
        processes = ServiceWorkers(host, int(port))
    else:
        processes = WorkerProcesses(
            [*modules, "--group", group, *(worker_option or [])],
            env={**os.environ, "CADENZA_RATE_WINDOW_S": str(interval)},
            ownership_plan=migration != "group",
        )
    pool = Pool(
        settings,
        group,
        flow,
        controller,
        processes,
        clock=clock,
        interval_s=interval,
        feedback_topic=feedback_topic,
        migration=migration,
    )
    server: MetricsServer | None = None
    if metrics_port is not None:
        server = pool.exporter.start_http(metrics_port, host=metrics_host)
    try:
        with stop_on_signals() as stop:
            sys.stdout.write(f"cadenza pool of {min_workers}..{max_workers} workers in group {group!r}\n")
            sys.stdout.flush()
            pool.run(stop)
    finally:
        if server is not None:
            server.close()
