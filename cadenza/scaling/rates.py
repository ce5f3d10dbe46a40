"""True and observed rates over windows, from counters that only grow.

DS2 decides from *true* rates: records per second of useful time, which say what an instance could
absorb if it never waited, whatever its current load. The worker already counts what they need for
its Prometheus export (records processed and produced, and the run-time histogram's sum, which is
the busy time), so the meter only differences those cumulative counters over a window: the hot path
gains nothing. This is the stats job's ``true_processing_rate`` (``sum(w) / sum(w * run_time)``)
with every execution counted (``w = 1``) instead of sampled spans.

Each closed window is also what a worker publishes on the feedback topic (header ``cadenza-kind:
true-rates``, see :mod:`cadenza.worker.tuning.rates`): :func:`encode_true_rates` writes that record and
:func:`parse_true_rates` reads it back, for a pool or any other consumer of the topic.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from cadenza.scaling.ds2 import InstanceRates
from cadenza.scheduling.clock import Clock

__all__ = [
    "ClosedWindow",
    "RateSample",
    "SubTopologyRates",
    "TrueRateMeter",
    "TrueRates",
    "encode_true_rates",
    "parse_true_rates",
    "true_rates_of",
    "window_rates",
]

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class RateSample:
    """Cumulative counters of one sub-topology instance: they only grow (a restart starts at 0)."""

    processed: int
    produced: int
    busy_s: float


def window_rates(before: RateSample | None, after: RateSample, wall_s: float) -> InstanceRates:
    """The rates between two samples ``wall_s`` seconds apart.

    A counter that went down means the instance restarted, so ``after`` is the whole window. With no
    busy time in the window the true rates are 0: nothing ran, so there is nothing to infer a
    capacity from (DS2 then treats the instance as unable to take input, and refuses to decide if
    input arrives rather than guessing).
    """
    if wall_s <= 0:
        raise ValueError(f"a rate window must last a positive time, got {wall_s!r}s")
    reset = before is None or (
        after.processed < before.processed or after.produced < before.produced or after.busy_s < before.busy_s
    )
    if reset or before is None:
        processed, produced, busy = after.processed, after.produced, after.busy_s
    else:
        processed = after.processed - before.processed
        produced = after.produced - before.produced
        busy = after.busy_s - before.busy_s
    if busy > 0:
        true_processing, true_output = processed / busy, produced / busy
    else:
        true_processing = true_output = 0.0
    return InstanceRates(true_processing, true_output, processed / wall_s, produced / wall_s)


@dataclass(frozen=True)
class ClosedWindow(Generic[K]):
    """One closed window of a :class:`TrueRateMeter`: its rates per key, between two clock times."""

    index: int
    """1 for the meter's first window, then one more per window: tells a reader whether it saw it."""
    start: float
    end: float
    rates: Mapping[K, InstanceRates]


class TrueRateMeter(Generic[K]):
    """Rates per key over consecutive windows of at least ``window_s`` seconds.

    Windows close lazily when :meth:`rates` or :meth:`window` is called (e.g. at a Prometheus scrape,
    or by the worker's loop once :attr:`closes_at` is past): the rates are exact over the window's
    real length, whenever it was closed. Every caller sees the same closed windows: whoever comes
    first closes one, the others read it (a window is never closed twice, so a scrape cannot cut
    short the window a publisher is waiting for).
    """

    def __init__(self, clock: Clock, read: Callable[[], Mapping[K, RateSample]], window_s: float) -> None:
        if not window_s > 0:
            raise ValueError(f"window_s must be positive, got {window_s!r}")
        self._clock = clock
        self._read = read
        self._window_s = window_s
        self._opened_at = clock.now()
        self._opened: Mapping[K, RateSample] = dict(read())
        self._last: ClosedWindow[K] | None = None
        #: Windows closed so far (the index of the last one); a plain int, read without the lock.
        self.closed = 0
        # Scrapes may come from several HTTP threads: one closes the window, the others see its result.
        self._lock = threading.Lock()

    @property
    def clock(self) -> Clock:
        return self._clock

    @property
    def closes_at(self) -> float:
        """The clock time from which the open window closes at the next call (read without the lock)."""
        return self._opened_at + self._window_s

    def sample(self) -> dict[K, RateSample]:
        """The cumulative counters now (what the next window will be differenced from)."""
        return dict(self._read())

    def rates(self) -> dict[K, InstanceRates]:
        """The last closed window's rates per key (empty until the first window closes)."""
        last = self.window()
        return {} if last is None else dict(last.rates)

    def window(self) -> ClosedWindow[K] | None:
        """The last closed window, after closing the open one if it has lasted ``window_s``."""
        with self._lock:
            now = self._clock.now()
            elapsed = now - self._opened_at
            if elapsed >= self._window_s:
                current = dict(self._read())
                rates = {
                    key: window_rates(self._opened.get(key), sample, elapsed)
                    for key, sample in current.items()
                }
                self._last = ClosedWindow(self.closed + 1, self._opened_at, now, rates)
                self._opened, self._opened_at = current, now
                self.closed += 1
            return self._last


@dataclass(frozen=True)
class SubTopologyRates:
    """One sub-topology's rates on one worker over a window, in records per second."""

    tenant: str
    pipeline: str
    sub_topology: str
    """The sub-topology's input topic (the ``sub_topology`` label of the Prometheus gauges)."""
    true_processing: float
    true_output: float
    observed_processing: float
    observed_output: float

    @property
    def instance(self) -> InstanceRates:
        """The rates as DS2 takes them (one instance of the sub-topology: this worker)."""
        return InstanceRates(
            self.true_processing, self.true_output, self.observed_processing, self.observed_output
        )


@dataclass(frozen=True)
class TrueRates:
    """A worker's ``true-rates`` record: every sub-topology's rates over one window (epoch seconds)."""

    worker: str
    window_start: float
    window_end: float
    rates: tuple[SubTopologyRates, ...]


_RATE_FIELDS = ("true_processing", "true_output", "observed_processing", "observed_output")
_LABEL_FIELDS = ("tenant", "pipeline", "sub_topology")


def encode_true_rates(record: TrueRates) -> bytes:
    """The JSON body of a ``true-rates`` feedback record (what :func:`parse_true_rates` reads)."""
    document = {
        "worker": record.worker,
        "window_start": record.window_start,
        "window_end": record.window_end,
        "rates": [
            {name: getattr(rates, name) for name in (*_LABEL_FIELDS, *_RATE_FIELDS)} for rates in record.rates
        ],
    }
    # allow_nan=False: a rate that is not finite is a bug upstream, refused here rather than written.
    return json.dumps(document, allow_nan=False, separators=(",", ":")).encode()


def parse_true_rates(value: bytes | None) -> TrueRates:
    """The record in a ``true-rates`` body; :class:`ValueError` naming what is wrong for bad input.

    The feedback topic is shared and written by other processes: nothing in it is trusted, so every
    field is checked (times and rates finite, rates not negative, the window not reversed). Fields
    it does not know are ignored, so that a newer writer can add some.
    """
    if not value:
        raise ValueError("true-rates record: empty value")
    try:
        document = json.loads(value)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"true-rates record: not JSON: {exc}") from None
    if not isinstance(document, dict):
        raise ValueError(f"true-rates record: expected a JSON object, got {type(document).__name__}")
    worker = _text(document, "worker", "true-rates record")
    start = _number(document, "window_start", "true-rates record")
    end = _number(document, "window_end", "true-rates record")
    if end < start:
        raise ValueError(f"true-rates record: window_end {end!r} is before window_start {start!r}")
    entries = document.get("rates")
    if not isinstance(entries, list):
        raise ValueError(f"true-rates record: 'rates' must be a list, got {type(entries).__name__}")
    return TrueRates(
        worker, start, end, tuple(_sub_topology_rates(entry, i) for i, entry in enumerate(entries))
    )


def _sub_topology_rates(entry: Any, index: int) -> SubTopologyRates:
    where = f"true-rates record: rates[{index}]"
    if not isinstance(entry, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(entry).__name__}")
    tenant, pipeline, sub_topology = (_text(entry, name, where) for name in _LABEL_FIELDS)
    rates = [_number(entry, name, where) for name in _RATE_FIELDS]
    for name, rate in zip(_RATE_FIELDS, rates, strict=True):
        if rate < 0:
            raise ValueError(f"{where}: {name!r} must not be negative, got {rate!r}")
    true_processing, true_output, observed_processing, observed_output = rates
    return SubTopologyRates(
        tenant, pipeline, sub_topology, true_processing, true_output, observed_processing, observed_output
    )


def _text(document: Mapping[str, Any], name: str, where: str) -> str:
    value = document.get(name)
    if not isinstance(value, str) or not value:
        raise ValueError(f"{where}: {name!r} must be a non-empty string, got {value!r}")
    return value


def _number(document: Mapping[str, Any], name: str, where: str) -> float:
    value = document.get(name)
    # bool is an int to Python, not a number to a reader of the record
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{where}: {name!r} must be a finite number, got {value!r}")
    return float(value)


def true_rates_of(worker: str, window: ClosedWindow[tuple[str, str, str]]) -> TrueRates:
    """The record a worker publishes for one closed window of its per-sub-topology meter."""
    return TrueRates(
        worker,
        window.start,
        window.end,
        tuple(
            SubTopologyRates(
                tenant,
                pipeline,
                sub,
                r.true_processing,
                r.true_output,
                r.observed_processing,
                r.observed_output,
            )
            for (tenant, pipeline, sub), r in sorted(window.rates.items())
        ),
    )
