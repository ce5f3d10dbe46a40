"""What the S1 harness reads from a cadenza worker's /metrics: per-stage latency histograms, the
requests it sent the broker, its loop's stalls, the hops its deadlines planned for, and BA's time per
job. Two scrapes around a measured phase, subtracted, give the phase alone; quantiles are
interpolated as Prometheus' ``histogram_quantile`` does, so the report and the dashboard agree.

The text is fetched and parsed, and series picked out of it, by :mod:`cadenza.infra.metrics.scrape`,
which the dashboard and the pool read workers with too; what is here is only which series S1 wants.
"""

from __future__ import annotations

from cadenza.infra.metrics.quantiles import bucket_bound
from cadenza.infra.metrics.quantiles import histogram_quantile as prometheus_quantile
from cadenza.infra.metrics.scrape import bucket_sums, counter_deltas, fetch, parse, sample_values

#: The worker's stage histograms, in the order a record meets them (see cadenza/schemas/METRICS.md):
#: source fetch, scheduler queue wait, run, repartition hop, window close wait, produce acknowledgement.
STAGES: dict[str, str] = {
    "fetch": "cadenza_fetch_latency_seconds",
    "queue_wait": "cadenza_queue_wait_seconds",
    "run": "cadenza_run_time_seconds",
    "repartition_hop": "cadenza_repartition_hop_seconds",
    "window_close_wait": "cadenza_window_close_wait_seconds",
    "produce_ack": "cadenza_produce_ack_seconds",
}
Buckets = dict[tuple[str, str], dict[float, float]]  # (stage, tenant) -> upper bound -> cumulative count


def scrape(port: int) -> str:
    """The worker's /metrics text, or "" if it does not answer."""
    try:
        return fetch(f"127.0.0.1:{port}", timeout=5)
    except OSError:
        return ""


def kafka_requests(before: str, after: str) -> dict[str, dict[str, float]]:
    """Requests per client (``producer``, ``lane0``...) and type sent between two scrapes of the
    worker's /metrics (``cadenza_kafka_requests_total``): what the worker asked of the broker, whose
    cost grows with requests more than with records."""
    sent: dict[str, dict[str, float]] = {}
    deltas = counter_deltas(before, after, "cadenza_kafka_requests_total", ("client", "request"))
    for (client, kind), count in deltas.items():
        sent.setdefault(client, {})[kind] = count
    return sent


def planned_hops(text: str) -> dict[str, float]:
    """Per tenant, the largest repartition hop (ms) its start deadlines counted at the scrape
    (``cadenza_planned_hop_seconds``): what the scheduler assumed, beside the hop it measured."""
    planned: dict[str, float] = {}
    series = sample_values(text, "cadenza_planned_hop_seconds", ("tenant", "pipeline", "operator"))
    for (tenant, _, _), seconds in series.items():
        planned[tenant] = max(planned.get(tenant, 0.0), round(seconds * 1000, 3))
    return planned


def mean_run_seconds(before: str, after: str, tenant: str) -> float | None:
    """The mean seconds ``tenant``'s operators spent on a record between two scrapes of the worker's
    /metrics (``cadenza_run_time_seconds``' sum over its count), or None if it ran nothing.

    For BA this is the wall time of a job: what the host's speed and the cores left to the worker
    made of it. Averaged over every job of a phase, it says what capacity the phase had far more
    precisely than the output rate during bursts does.
    """
    labels = ("tenant", "pipeline", "operator")
    sums = counter_deltas(before, after, "cadenza_run_time_seconds_sum", labels)
    counts = counter_deltas(before, after, "cadenza_run_time_seconds_count", labels)
    total = sum(v for key, v in sums.items() if key[0] == tenant)
    runs = sum(v for key, v in counts.items() if key[0] == tenant)
    return total / runs if runs else None


def loop_stalls(before: str, after: str) -> dict[str, dict[str, float]]:
    """Stalls of the worker's loop between two scrapes, by the phase that took longest: how many, and
    their busy seconds (``cadenza_worker_stalls_total``, see
    :mod:`cadenza.worker.reliability.loop_watch`). Every
    tenant's records waited them out, whatever the policy."""
    counts = counter_deltas(before, after, "cadenza_worker_stalls_total", ("phase",))
    seconds = counter_deltas(before, after, "cadenza_worker_stall_seconds_total", ("phase",))
    return {phase: {"stalls": n, "seconds": seconds.get((phase,), 0.0)} for (phase,), n in counts.items()}


def stage_buckets(text: str) -> Buckets:
    """Per stage and tenant, the cumulative bucket counts summed over the tenant's operators."""
    samples = parse(text)
    return {
        (stage, tenant): buckets
        for stage, metric in STAGES.items()
        for (tenant,), buckets in bucket_sums(samples, metric, ("tenant",)).items()
    }


def stage_percentiles(before: Buckets, after: Buckets) -> dict[str, dict[str, dict[str, float | None]]]:
    """Per tenant and stage, p50 and p99 (ms) and the count of what was observed between two scrapes.

    The measured phase only: the scrape taken when it starts is subtracted from the one at its end.
    A quantile is interpolated inside its bucket as Prometheus' ``histogram_quantile`` does; the
    queue wait and run time of a tenant pool every operator it has (LS's records queue and run twice:
    before and after the repartition).
    """
    out: dict[str, dict[str, dict[str, float | None]]] = {}
    for (stage, tenant), cumulative in after.items():
        base = before.get((stage, tenant), {})
        delta = {bound: count - base.get(bound, 0.0) for bound, count in cumulative.items()}
        total = delta.get(float("inf"), 0.0)
        if total <= 0:
            continue
        out.setdefault(tenant, {})[stage] = {
            "p50_ms": histogram_quantile(delta, 0.5),
            "p99_ms": histogram_quantile(delta, 0.99),
            "count": total,
        }
    return out


def histogram_quantile(cumulative: dict[float, float], q: float) -> float | None:
    """Quantile ``q`` (ms) of a histogram given as cumulative counts per upper bound (``inf`` last):
    the dashboard's estimate (Prometheus' own), so that the S1 report and the dashboard agree."""
    value = prometheus_quantile(q, cumulative)
    return None if value is None else round(value * 1000, 3)


def scheduler_queue_wait(text: str) -> dict[str, dict[str, float | None]]:
    """Per tenant, p50 and p99 of the wait in the worker's scheduler queues (whole run, warm-up included).

    Read from the worker's own ``cadenza_queue_wait_seconds`` histogram, so each is the upper bound of
    the bucket the quantile falls in. Set beside the end-to-end latency it tells how much of a tenant's
    latency the scheduler controls: the rest is spent fetching, producing and crossing the broker
    (``stages`` in the JSON breaks that down).
    """
    return {
        tenant: {
            "queue_wait_p50_ms": _bucket_quantile(cumulative, 0.5),
            "queue_wait_p99_ms": _bucket_quantile(cumulative, 0.99),
        }
        for (stage, tenant), cumulative in stage_buckets(text).items()
        if stage == "queue_wait"
    }


def _bucket_quantile(cumulative: dict[float, float], q: float) -> float | None:
    """Upper bound (ms) of the histogram bucket holding quantile ``q``; None if empty or beyond the last."""
    bound = bucket_bound(q, cumulative)
    return None if bound is None else round(bound * 1000, 2)
