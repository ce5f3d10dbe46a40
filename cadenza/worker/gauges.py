"""The worker-wide metrics a started worker exports: read at each scrape from what it runs now.

Per-operator metrics are recorded by the operators themselves (plan assembly gives them their
histograms); these are the gauges and counters of the worker as a whole: buffered records, paused
partitions, stalls, stopped pipelines, latency targets, Kafka clients' reachability, lag, errors
and requests, watermark idle timeouts, planned hop costs and quarantined records.
"""

from __future__ import annotations

from collections.abc import Callable

from cadenza.infra.kafka.clients import ClientErrors
from cadenza.infra.metrics import names
from cadenza.infra.metrics.prometheus import PrometheusExporter
from cadenza.pipelines import PipelineGraph
from cadenza.worker.engine.engine import Engine
from cadenza.worker.engine.lessees.hub import LesseeHub
from cadenza.worker.engine.lessees.leased_step import LeasedStep
from cadenza.worker.engine.operators.progress import FrontierTap
from cadenza.worker.engine.operators.stateful import StatefulStep
from cadenza.worker.engine.output import Output
from cadenza.worker.kafka.membership import KafkaMembership
from cadenza.worker.reliability.loop_watch import LoopWatch
from cadenza.worker.reliability.quarantine import QuarantineGuard

__all__ = ["track_worker"]


def track_worker(  # noqa: PLR0917 - one of each part of a started worker
    exporter: PrometheusExporter,
    graphs: list[PipelineGraph],
    engine: Engine,
    membership: KafkaMembership,
    output: Output,
    loop_watch: LoopWatch,
    guard: QuarantineGuard,
) -> None:
    """Register the worker's callbacks on ``exporter`` (once per started worker)."""
    register = exporter.register_callback
    plan = engine.plan
    stateful: dict[tuple[str, str, str], StatefulStep | FrontierTap] = {
        (schedule.tenant, schedule.pipeline, window.node_id): window
        for schedule in plan.schedules
        for window in schedule.task.windows
    }
    for schedule in plan.schedules:  # a key_by's frontier times out inputs like a window
        frontier = schedule.task.frontier
        if frontier is not None:
            stateful[(schedule.tenant, schedule.pipeline, frontier.node_id)] = frontier
    register(
        names.WATERMARK_IDLE_TIMEOUTS, lambda: {labels: w.idle_timeouts for labels, w in stateful.items()}
    )
    scheduler = engine.scheduler
    register(names.BUFFERED_RECORDS, lambda: len(scheduler))
    register(names.WORKER_STALLS, loop_watch.counts)
    register(names.WORKER_STALL_SECONDS, loop_watch.stalled_seconds)
    register(names.PAUSED_PARTITIONS, lambda: len(membership.flow.paused))
    tenants = {graph.name: graph.tenant for graph in graphs}
    targets: dict[tuple[str, ...], float | int] = {(g.tenant, g.name): g.latency_target_s for g in graphs}
    register(names.LATENCY_TARGET, lambda: targets)
    queued = engine.queued
    register(
        names.PARTITION_BUFFERED_RECORDS,
        lambda: {(topic, str(part)): queued(topic, part) for topic, part in membership.assignment},
    )
    stopped = engine.stopped
    register(
        names.PIPELINE_STOPPED,
        lambda: {(tenants[name], name): 1 if name in stopped else 0 for name in tenants},
    )
    _track_clients(register, membership, output)
    if engine.lessees is not None:
        _track_lessees(register, engine.lessees)
    register(names.RECORDS_QUARANTINED, lambda: {(t,): n for t, n in guard.quarantined.items()})


def _track_lessees(register: Callable[..., None], hub: LesseeHub) -> None:
    steps = {(s.tenant, s.pipeline, s.node_id): s for s in hub.steps}

    def each(read: Callable[[LeasedStep], float | int]) -> Callable[[], dict[tuple[str, ...], float | int]]:
        return lambda: {labels: read(step) for labels, step in steps.items()}

    register(names.LESSEES, each(lambda s: len(s.lessees)))
    register(names.LESSEE_LEASES, each(lambda s: s.leasing.leases))
    register(names.LESSEE_RELEASES, each(lambda s: s.leasing.releases))
    register(names.LESSEE_SECONDS, each(lambda s: s.leased_seconds(hub.clock())))
    register(names.LESSEE_TIMEOUTS, each(lambda s: s.stats.timeouts))
    register(names.LESSEE_DEATHS, each(lambda s: s.stats.deaths))
    register(names.LESSEE_ABANDONED, each(lambda s: s.stats.abandoned))
    register(names.LESSEE_HANDOFF_SECONDS, each(lambda s: s.stats.handoff_seconds))
    register(names.LESSEE_HANDED_CALLS, each(lambda s: s.stats.handoff_calls))
    register(names.LESSOR_CALLS, each(lambda s: s.stats.lessor_calls))
    register(names.LESSEE_MERGE_SECONDS, each(lambda s: s.stats.merge_seconds))


def _track_clients(register: Callable[..., None], membership: KafkaMembership, output: Output) -> None:
    consumers = list(membership.consumers)
    producers = list(output.lane_errors)
    register(names.BROKER_REACHABLE, lambda: int(all(errors.brokers_up for _, errors in consumers)))
    register(
        names.CONSUMER_LAG,
        lambda: {
            (t, str(p)): n
            for _, errors in consumers
            for (t, p), n in errors.consumer_lag.items()
            if (t, p) in membership.assignment
        },
    )
    every: list[ClientErrors] = [errors for _, errors in consumers] + [errors for _, errors in producers]

    def client_errors() -> dict[tuple[str, ...], float | int]:
        totals: dict[tuple[str, ...], float | int] = {}
        for errors in every:
            for name, count in dict(errors.counts).items():
                totals[(errors.role, name)] = totals.get((errors.role, name), 0) + count
        return totals

    register(names.KAFKA_CLIENT_ERRORS, client_errors)
    clients = [
        *((lane.name, errors) for lane, (_, errors) in zip(membership.lanes, consumers, strict=True)),
        *producers,
    ]
    register(
        names.KAFKA_REQUESTS,
        lambda: {(client, kind): n for client, errors in clients for kind, n in errors.requests.items()},
    )
