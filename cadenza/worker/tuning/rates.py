"""Each sub-topology's true and observed rates on this worker, for DS2 scaling decisions.

Read from the per-operator Prometheus series the executor already keeps (no work on the hot path):
records processed at the sub-topology's entry, the entry's run-time sum (a sub-topology's steps run
inside its entry's measured run, so that sum is its busy time) and the records its steps produced to
sink and repartition topics. :class:`cadenza.scaling.rates.TrueRateMeter` differences them over
windows; the results are exported as gauges at scrape time.

With a feedback topic, the worker also publishes every closed window there (:class:`RatesPublisher`):
one record per window, key the worker id, header ``cadenza-kind: true-rates``, the JSON body of
:func:`cadenza.scaling.rates.encode_true_rates`. The worker's loop closes the windows at their
period (a worker nobody scrapes publishes too); scrapes and the loop share the meter's windows, so
each window is published once, with the same rates the gauges show.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence

from confluent_kafka import KafkaError, KafkaException, Message

from cadenza.errors import ConfigError
from cadenza.feedback.records import KIND_HEADER, TRUE_RATES_KIND
from cadenza.infra.metrics import names
from cadenza.infra.metrics.prometheus import PrometheusExporter
from cadenza.scaling.rates import RateSample, TrueRateMeter, encode_true_rates, true_rates_of
from cadenza.scheduling.clock import Clock, SystemClock
from cadenza.worker.engine.context_stamps import TaskSchedule
from cadenza.worker.engine.output import ProducerLike

__all__ = [
    "DEFAULT_RATE_WINDOW_S",
    "RatesPublisher",
    "SubTopologyKey",
    "rate_window_from_env",
    "sub_topology_samples",
    "track_true_rates",
]

_log = logging.getLogger("cadenza.worker.tuning.rates")

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


class RatesPublisher:
    """Sends each closed window of a worker's meter to the feedback topic once.

    :meth:`poll` runs on the worker's loop after every step: until the open window is due (or a
    scrape has closed one), it costs a clock read and two comparisons. ``producer`` is the worker's
    own (its output's): the record is queued, never flushed, and served with the rest. A record the
    local queue refuses, or the broker does not take, is counted (:attr:`dropped`, :attr:`failed`)
    and logged, never waited for: the next window carries fresh rates anyway, while a stalled loop
    would delay every pipeline. A loop stalled past a whole window (a long user call) publishes the
    newest window when it comes back; those in between were closed by scrapes and are skipped.
    """

    def __init__(
        self, meter: TrueRateMeter[SubTopologyKey], worker_id: str, producer: ProducerLike, topic: str
    ) -> None:
        self._meter = meter
        self._worker = worker_id
        self._key = worker_id.encode()
        self._producer = producer
        self.topic = topic
        self._headers = [(KIND_HEADER, TRUE_RATES_KIND)]
        #: The index of the last window published (0: none yet).
        self.published = 0
        self.dropped = 0
        self.failed = 0

    def poll(self) -> bool:
        """Publish the last closed window if it is new (closing the open one if due); whether it did."""
        meter = self._meter
        if meter.closed == self.published and meter.clock.now() < meter.closes_at:
            return False
        window = meter.window()
        if window is None or window.index == self.published:
            return False
        self.published = window.index
        try:
            value = encode_true_rates(true_rates_of(self._worker, window))
            self._producer.produce(
                self.topic, value, self._key, headers=self._headers, on_delivery=self._delivered
            )
        except (ValueError, BufferError, KafkaException) as exc:
            self.dropped += 1
            _log.warning("true rates of window %d not published to %s: %s", window.index, self.topic, exc)
            return False
        return True

    def _delivered(self, error: KafkaError | None, message: Message) -> None:
        if error is not None:
            self.failed += 1
            _log.warning("true rates not delivered to %s: %s", self.topic, error.str())
