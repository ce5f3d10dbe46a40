"""Each sub-topology's true and observed rates on this worker, for DS2 scaling decisions.

Read from the per-operator Prometheus series the executor already keeps (no work on the hot path):
records processed at the sub-topology's entry, the entry's run-time sum (a sub-topology's steps run
inside its entry's measured run, so that sum is its busy time) and the records its steps produced to
sink and repartition topics. :class:`cadenza.scaling.rates.TrueRateMeter` differences them over
windows; the results are exported as gauges at scrape time.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

from cadenza.errors import ConfigError
from cadenza.infra.metrics import names
from cadenza.infra.metrics.prometheus import PrometheusExporter
from cadenza.scaling.rates import RateSample, TrueRateMeter
from cadenza.scheduling.clock import Clock, SystemClock
from cadenza.worker.context_stamps import TaskSchedule

__all__ = [
    "DEFAULT_RATE_WINDOW_S",
    "SubTopologyKey",
    "rate_window_from_env",
    "sub_topology_samples",
    "track_true_rates",
]

DEFAULT_RATE_WINDOW_S = 10.0
"""Long enough to hold many quanta, short enough for a controller evaluating every 10-30 s."""


def rate_window_from_env() -> float:
    """``CADENZA_RATE_WINDOW_S`` (``cadenza pool`` sets it to its policy interval), else the default."""
    raw = os.environ.get("CADENZA_RATE_WINDOW_S")
    if raw is None or raw == "":
        return DEFAULT_RATE_WINDOW_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        raise ConfigError(f"CADENZA_RATE_WINDOW_S must be a positive number of seconds, got {raw!r}")
    return value


SubTopologyKey = tuple[str, str, str]
"""(tenant, pipeline, sub-topology input topic): the label values of the rate gauges."""


def sub_topology_samples(
    exporter: PrometheusExporter, schedules: Sequence[TaskSchedule]
) -> Callable[[], dict[SubTopologyKey, RateSample]]:
    """A reader of each sub-topology's cumulative counters (looked up, never created)."""

    def read() -> dict[SubTopologyKey, RateSample]:
        by_labels = {ops.labels: ops for ops in exporter.operators()}
        samples: dict[SubTopologyKey, RateSample] = {}
        for schedule in schedules:
            sub = schedule.task.subtopology
            entry = schedule.metrics
            produced = 0
            for node in sub.nodes:
                ops = by_labels.get((schedule.tenant, schedule.pipeline, node))
                if ops is not None:
                    produced += ops.produced
            key = (schedule.tenant, schedule.pipeline, sub.input_topic)
            samples[key] = RateSample(entry.processed, produced, entry.run_time.sum)
        return samples

    return read


def track_true_rates(
    exporter: PrometheusExporter,
    schedules: Sequence[TaskSchedule],
    *,
    window_s: float | None = None,
    clock: Clock | None = None,
) -> TrueRateMeter[SubTopologyKey]:
    """Export the four rate gauges of every sub-topology, over windows of ``window_s``.

    ``window_s`` None: ``CADENZA_RATE_WINDOW_S``, else :data:`DEFAULT_RATE_WINDOW_S`.
    """
    window = rate_window_from_env() if window_s is None else window_s
    meter = TrueRateMeter(clock or SystemClock(), sub_topology_samples(exporter, schedules), window)
    exporter.register_callback(
        names.TRUE_PROCESSING_RATE, lambda: {k: r.true_processing for k, r in meter.rates().items()}
    )
    exporter.register_callback(
        names.TRUE_OUTPUT_RATE, lambda: {k: r.true_output for k, r in meter.rates().items()}
    )
    exporter.register_callback(
        names.OBSERVED_PROCESSING_RATE,
        lambda: {k: r.observed_processing for k, r in meter.rates().items()},
    )
    exporter.register_callback(
        names.OBSERVED_OUTPUT_RATE, lambda: {k: r.observed_output for k, r in meter.rates().items()}
    )
    return meter
