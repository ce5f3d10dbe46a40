"""Reading one worker's Prometheus endpoint into the numbers the dashboard draws.

The dashboard keeps no state of its own that matters: everything it shows is derived from what the
workers already export at ``--metrics-port``, so a restart of the dashboard loses only the history it
drew. The text is parsed and fetched by :mod:`cadenza.infra.metrics.scrape` (every reader of a
worker's ``/metrics`` shares it), and only the series named in :mod:`cadenza.infra.metrics.names` are
kept, summed over operators into one entry per (tenant, pipeline). The lessee series of steps declared
with ``parallel=`` are the exception: they are kept per step (tenant, pipeline, operator), because a
pipeline's sum would hide which of its steps leases and which runs on the loop.
"""

from __future__ import annotations

import urllib.error
from dataclasses import dataclass, field, fields

from cadenza.infra.metrics import names
from cadenza.infra.metrics.quantiles import Buckets
from cadenza.infra.metrics.scrape import (
    ExpositionError,
    Sample,
    add_bucket,
    fetch,
    label_key,
    metrics_url,
    parse,
)

__all__ = [
    "LESSEE_COUNTERS",
    "PipelineCounts",
    "ScrapeError",
    "Step",
    "StepLessees",
    "WorkerSnapshot",
    "metrics_url",
    "parse_exposition",
    "scrape_worker",
]


class ScrapeError(Exception):
    """A worker's endpoint did not answer, or answered with something that is not an exposition."""


@dataclass
class PipelineCounts:
    """The cumulative counters of one (tenant, pipeline) on one worker, summed over its operators."""

    consumed: float = 0.0
    met: float = 0.0
    missed: float = 0.0
    dead_lettered: float = 0.0
    target_s: float | None = None
    e2e: Buckets = field(default_factory=dict)
    queue_wait: Buckets = field(default_factory=dict)

    @property
    def results(self) -> float:
        return self.met + self.missed


Step = tuple[str, str, str]
"""(tenant, pipeline, operator): one step declared with ``parallel=``."""


@dataclass
class StepLessees:
    """The lessee series of one parallel step on one worker: a gauge, then cumulative counters."""

    held: float | None = None
    """``None`` when the worker did not export ``cadenza_lessees`` for the step: nothing to show."""
    leases: float = 0.0
    releases: float = 0.0
    seconds: float = 0.0
    timeouts: float = 0.0
    deaths: float = 0.0
    abandoned: float = 0.0
    handoff_seconds: float = 0.0
    handed_calls: float = 0.0
    lessor_calls: float = 0.0


LESSEE_COUNTERS: tuple[str, ...] = tuple(f.name for f in fields(StepLessees) if f.name != "held")
"""The counter fields of :class:`StepLessees`, so a window's growth is taken of each alike (and of a
counter added later without another line here)."""


@dataclass
class WorkerSnapshot:
    """One scrape: cumulative counters (which only grow until the worker restarts) and gauges."""

    at: float
    pipelines: dict[tuple[str, str], PipelineCounts] = field(default_factory=dict)
    buffered: float = 0.0
    paused: float = 0.0
    busy_seconds: float = 0.0
    """Sum of every operator's run time: its rate is the share of wall time the worker ran records."""
    restarts: float = 0.0
    partition_buffered: dict[tuple[str, int], float] = field(default_factory=dict)
    consumer_lag: dict[tuple[str, int], float] = field(default_factory=dict)
    lessees: dict[Step, StepLessees] = field(default_factory=dict)


def _pipeline(snapshot: WorkerSnapshot, sample: Sample) -> PipelineCounts | None:
    key = label_key(sample, ("tenant", "pipeline"))
    if key is None:
        return None
    tenant, pipeline = key
    return snapshot.pipelines.setdefault((tenant, pipeline), PipelineCounts())


def _partition(labels: dict[str, str]) -> tuple[str, int] | None:
    try:
        return labels["topic"], int(labels["partition"])
    except (KeyError, ValueError):
        return None


_COUNTERS = {
    names.RECORDS_CONSUMED.sample_name: "consumed",
    names.DEADLINES_MET.sample_name: "met",
    names.DEADLINES_MISSED.sample_name: "missed",
    names.RECORDS_DEAD_LETTERED.sample_name: "dead_lettered",
}
_LESSEE_SERIES = {
    names.LESSEES.sample_name: "held",
    names.LESSEE_LEASES.sample_name: "leases",
    names.LESSEE_RELEASES.sample_name: "releases",
    names.LESSEE_SECONDS.sample_name: "seconds",
    names.LESSEE_TIMEOUTS.sample_name: "timeouts",
    names.LESSEE_DEATHS.sample_name: "deaths",
    names.LESSEE_ABANDONED.sample_name: "abandoned",
    names.LESSEE_HANDOFF_SECONDS.sample_name: "handoff_seconds",
    names.LESSEE_HANDED_CALLS.sample_name: "handed_calls",
    names.LESSOR_CALLS.sample_name: "lessor_calls",
}
_BUCKETS = {
    f"{names.E2E_LATENCY.name}_bucket": "e2e",
    f"{names.QUEUE_WAIT.name}_bucket": "queue_wait",
}


def parse_exposition(text: str, at: float) -> WorkerSnapshot:
    """The dashboard's view of one exposition; unknown series are ignored, malformed text raises
    :class:`ScrapeError` (the worker is then shown as down with the parser's message)."""
    snapshot = WorkerSnapshot(at=at)
    try:
        samples = parse(text)
    except ExpositionError as exc:
        raise ScrapeError(f"not a Prometheus exposition: {exc}") from exc
    for sample in samples:
        name, labels, value = sample.name, sample.labels, float(sample.value)
        if name in _COUNTERS:
            counts = _pipeline(snapshot, sample)
            if counts is not None:
                attribute = _COUNTERS[name]
                setattr(counts, attribute, getattr(counts, attribute) + value)
        elif name in _LESSEE_SERIES:
            step = label_key(sample, names.OPERATOR_LABELS)
            if step is not None:
                tenant, pipeline, operator = step
                lessees = snapshot.lessees.setdefault((tenant, pipeline, operator), StepLessees())
                setattr(lessees, _LESSEE_SERIES[name], value)
        elif name in _BUCKETS:
            counts = _pipeline(snapshot, sample)
            if counts is not None:
                add_bucket(getattr(counts, _BUCKETS[name]), sample)
        elif name == names.LATENCY_TARGET.sample_name:
            counts = _pipeline(snapshot, sample)
            if counts is not None:
                counts.target_s = value
        elif name == f"{names.RUN_TIME.name}_sum":
            snapshot.busy_seconds += value
        elif name == names.BUFFERED_RECORDS.sample_name:
            snapshot.buffered = value
        elif name == names.PAUSED_PARTITIONS.sample_name:
            snapshot.paused = value
        elif name == names.WORKER_RESTARTS.sample_name:
            snapshot.restarts = value
        elif name in (names.PARTITION_BUFFERED_RECORDS.sample_name, names.CONSUMER_LAG.sample_name):
            key = _partition(labels)
            if key is not None:
                target = (
                    snapshot.consumer_lag
                    if name == names.CONSUMER_LAG.sample_name
                    else snapshot.partition_buffered
                )
                target[key] = value
    return snapshot


def scrape_worker(url: str, at: float, timeout: float = 2.0) -> WorkerSnapshot:
    """Fetch and parse ``url``; any failure (refused, timeout, HTTP error, garbage) is a
    :class:`ScrapeError` with a message fit for the page."""
    try:
        text = fetch(url, timeout)
    except urllib.error.HTTPError as exc:
        raise ScrapeError(f"HTTP {exc.code} {exc.reason}") from exc
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ScrapeError(f"no answer: {reason}") from exc
    return parse_exposition(text, at)
