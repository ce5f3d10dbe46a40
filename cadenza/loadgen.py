"""Load for the example pipelines: a seeded, pure schedule of records and the loop that produces it.

Two kinds of record, shaped like the examples' pydantic models (the examples are not part of the
installed package, so the shapes are repeated here and a test checks they validate):

- ``clicks`` for ``examples/clicks_per_user.py`` (``Click``: user, page, ts), keyed by user; a share of
  them hit ``/health``, which that pipeline filters out;
- ``orders`` for ``examples/bulk_enrich.py`` (``Order``: order_id, customer, amount), keyed by customer.

The schedule is separate from producing so that a benchmark can reuse it (and a test can check it)
without a broker: :func:`schedule` is a pure function of its arguments that yields
``(send_time, topic, record)``. The same seed gives the same records at the same offsets from the
start, run after run; only the ``epoch`` (the wall-clock start, which the clicks' event time ``ts``
counts from) changes.

Arrivals are evenly spaced at the stream's rate, or, with :class:`Bursts`, come in bursts whose sizes
follow a Pareto distribution (heavy-tailed: most bursts are small, a few are huge, as in Cameo's
multi-tenant experiment). A burst of ``n`` records is sent at ``peak`` times the mean rate, and the
next burst starts ``n / rate`` seconds after it began, so the mean rate is the asked rate exactly,
whatever sizes are drawn: a burst start is always where the steady schedule would be, and records
inside a burst are only ever early, never late.
"""

from __future__ import annotations

import heapq
import itertools
import json
import math
import random
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from confluent_kafka import Producer

from cadenza.errors import ConfigError
from cadenza.infra.kafka.clients import DeliveryReport, flush_or_raise, make_admin, make_producer
from cadenza.infra.kafka.topics import TopicSpec, ensure_topics
from cadenza.settings import KafkaSettings

__all__ = [
    "DEFAULT_TOPICS",
    "HEALTH_PAGE",
    "KINDS",
    "Bursts",
    "Kind",
    "LoadPlan",
    "LoadRecord",
    "LoadStats",
    "Planned",
    "Stream",
    "produce_planned",
    "run_load",
    "schedule",
]

Kind = Literal["clicks", "orders"]
KINDS: tuple[Kind, ...] = ("clicks", "orders")
#: The source topics of the examples.
DEFAULT_TOPICS: dict[Kind, str] = {"clicks": "clicks", "orders": "orders"}

_PAGES = ("/", "/search", "/cart", "/checkout", "/product/1", "/product/2", "/product/3", "/help")
HEALTH_PAGE = "/health"


@dataclass(frozen=True, slots=True)
class LoadRecord:
    """One record to produce: a string key and a JSON object value."""

    key: str
    value: dict[str, Any]

    def encode(self) -> tuple[bytes, bytes]:
        """(key, value) bytes as the examples' JSON sources read them."""
        return self.key.encode(), json.dumps(self.value, separators=(",", ":")).encode()


class Planned(NamedTuple):
    """A record and when to send it, in seconds after the start of the run."""

    send_time: float
    topic: str
    record: LoadRecord


@dataclass(frozen=True, slots=True)
class Bursts:
    """Pareto-sized bursts that keep the mean rate.

    ``alpha`` is the Pareto shape; it must exceed 1, or the mean burst size is infinite and no mean
    rate can be kept (1 < alpha <= 2: finite mean, infinite variance, the heavy tail that makes
    bursts hurt). ``mean_seconds`` is the mean burst size in seconds of traffic at the mean rate
    (a burst of ``mean_seconds * rate`` records on average). ``peak`` is the rate inside a burst as a
    multiple of the mean rate (``math.inf``: all records of a burst at once). ``max_seconds`` caps one
    burst, so a single draw from the tail cannot swallow a whole run; the mean rate is kept anyway
    because gaps follow the sizes actually drawn.
    """

    alpha: float = 1.5
    mean_seconds: float = 1.0
    peak: float = 10.0
    max_seconds: float = 60.0

    def __post_init__(self) -> None:
        if not (self.alpha > 1 and math.isfinite(self.alpha)):
            raise ConfigError(f"burst alpha must be a finite number > 1 (a finite mean), got {self.alpha}")
        if not (self.mean_seconds > 0 and math.isfinite(self.mean_seconds)):
            raise ConfigError(f"burst mean must be a positive number of seconds, got {self.mean_seconds}")
        if not self.peak >= 1:
            raise ConfigError(f"burst peak must be >= 1 (a multiple of the mean rate), got {self.peak}")
        if not self.max_seconds >= self.mean_seconds:
            raise ConfigError(
                f"burst max ({self.max_seconds}s) must be at least the mean ({self.mean_seconds}s)"
            )

    def sizes(self, rng: random.Random, rate: float) -> Iterator[int]:
        """Burst sizes in records: Pareto with the mean ``mean_seconds * rate`` (before rounding/cap)."""
        # paretovariate(alpha) has minimum 1 and mean alpha / (alpha - 1); scale it to the wanted mean.
        scale = self.mean_seconds * rate * (self.alpha - 1) / self.alpha
        cap = max(1, round(self.max_seconds * rate))
        while True:
            yield min(cap, max(1, round(scale * rng.paretovariate(self.alpha))))


@dataclass(frozen=True, slots=True)
class Stream:
    """One kind of record at a mean ``rate`` (records/s) into ``topic`` (default: the example's).

    ``keys`` is how many distinct users (clicks) or customers (orders) there are; ``key_prefix``
    names them (``user-0``, ...), so a test can tell its own keys from other traffic on a shared topic.
    ``health_share`` is the share of clicks on ``/health`` (filtered out by the clicks pipeline).
    """

    kind: Kind
    rate: float
    topic: str = ""
    keys: int = 50
    key_prefix: str = ""
    health_share: float = 0.05

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ConfigError(f"unknown record kind {self.kind!r}; choose one of {', '.join(KINDS)}")
        if not (self.rate > 0 and math.isfinite(self.rate)):
            raise ConfigError(f"{self.kind}: rate must be a positive number of records/s, got {self.rate}")
        if self.keys < 1:
            raise ConfigError(f"{self.kind}: keys must be >= 1, got {self.keys}")
        if not 0 <= self.health_share <= 1:
            raise ConfigError(f"{self.kind}: health share must be within [0, 1], got {self.health_share}")
        if not self.topic:
            object.__setattr__(self, "topic", DEFAULT_TOPICS[self.kind])
        if not self.key_prefix:
            object.__setattr__(self, "key_prefix", "user-" if self.kind == "clicks" else "customer-")

    def make(self, rng: random.Random, index: int, event_time: float, seed: int) -> LoadRecord:
        """The ``index``-th record of this stream, at ``event_time`` (wall-clock seconds)."""
        key = f"{self.key_prefix}{rng.randrange(self.keys)}"
        if self.kind == "clicks":
            page = HEALTH_PAGE if rng.random() < self.health_share else rng.choice(_PAGES)
            return LoadRecord(key, {"user": key, "page": page, "ts": event_time})
        amount = round(rng.lognormvariate(3.0, 1.0), 2)
        return LoadRecord(key, {"order_id": f"o-{seed}-{index}", "customer": key, "amount": amount})


def _send_times(stream: Stream, rng: random.Random, bursts: Bursts | None) -> Iterator[float]:
    if bursts is None:
        for index in itertools.count():
            yield index / stream.rate
        return
    start = 0  # records before this burst; the burst starts where the steady schedule would
    for size in bursts.sizes(rng, stream.rate):
        for offset in range(size):
            yield start / stream.rate + offset / (bursts.peak * stream.rate)
        start += size


def _stream_schedule(
    stream: Stream, position: int, seed: int, epoch: float, bursts: Bursts | None
) -> Iterator[Planned]:
    # One generator per stream for times, one for contents, both derived from the seed and the
    # stream's position and kind: adding a stream or enabling bursts leaves the other records alone.
    times_rng = random.Random(f"cadenza-loadgen:{seed}:{position}:{stream.kind}:times")
    values_rng = random.Random(f"cadenza-loadgen:{seed}:{position}:{stream.kind}:values")
    for index, send_time in enumerate(_send_times(stream, times_rng, bursts)):
        yield Planned(send_time, stream.topic, stream.make(values_rng, index, epoch + send_time, seed))


def schedule(
    streams: Iterable[Stream],
    *,
    seed: int = 0,
    epoch: float = 0.0,
    bursts: Bursts | None = None,
    duration: float | None = None,
    count: int | None = None,
) -> Iterator[Planned]:
    """Every record of the run in send order: ``(send_time, topic, record)``, ``send_time`` ascending.

    Stops before the first record at or after ``duration`` seconds, or after ``count`` records in
    all, whichever comes first; with neither it never stops (take what you need). Records of
    several streams due at the same time keep the order the streams were given in. Pure: nothing is
    read from the clock; ``epoch`` is the wall-clock time that the clicks' event time counts from.
    """
    chosen = list(streams)
    if not chosen:
        raise ConfigError("no stream to generate: give at least one kind of record with a positive rate")
    if duration is not None and not duration > 0:
        raise ConfigError(f"duration must be a positive number of seconds, got {duration}")
    if count is not None and count < 0:
        raise ConfigError(f"count must be >= 0, got {count}")
    merged: Iterator[Planned] = heapq.merge(
        *(_stream_schedule(stream, position, seed, epoch, bursts) for position, stream in enumerate(chosen)),
        key=lambda planned: planned.send_time,
    )
    if duration is not None:
        merged = itertools.takewhile(lambda planned: planned.send_time < duration, merged)
    if count is not None:
        merged = itertools.islice(merged, count)
    return merged


@dataclass(frozen=True, slots=True)
class LoadPlan:
    """What :func:`run_load` produces: the streams and how long, seeded."""

    streams: tuple[Stream, ...]
    seed: int = 0
    bursts: Bursts | None = None
    duration: float | None = None
    count: int | None = None

    def schedule(self, epoch: float) -> Iterator[Planned]:
        return schedule(
            self.streams,
            seed=self.seed,
            epoch=epoch,
            bursts=self.bursts,
            duration=self.duration,
            count=self.count,
        )

    @property
    def topics(self) -> list[str]:
        return list(dict.fromkeys(stream.topic for stream in self.streams))


@dataclass(slots=True)
class LoadStats:
    """Progress of a run. ``queued`` counts records handed to the producer, ``delivered`` the acked.

    ``behind`` is the largest delay of a send after its planned time: near zero, the generator kept
    up; large, the producer (or this machine) could not, and the rate it asked for was not the rate
    the cluster got.
    """

    planned_total: int | None = None
    queued: dict[str, int] = field(default_factory=dict)
    delivered: int = 0
    elapsed: float = 0.0
    behind: float = 0.0

    @property
    def total(self) -> int:
        return sum(self.queued.values())

    @property
    def rate(self) -> float:
        return self.total / self.elapsed if self.elapsed > 0 else 0.0


def _produce(producer: Producer, planned: Planned, report: DeliveryReport) -> None:
    key, value = planned.record.encode()
    while True:
        try:
            producer.produce(planned.topic, value, key, on_delivery=report)
            return
        except BufferError:
            # The local queue is full: serve delivery reports until there is room.
            producer.poll(0.05)


def produce_planned(
    settings: KafkaSettings,
    planned: Iterable[Planned],
    *,
    start: float,
    planned_total: int | None = None,
    end: float | None = None,
    stop: Callable[[], bool] | None = None,
    on_progress: Callable[[LoadStats], None] | None = None,
    progress_interval: float = 1.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> LoadStats:
    """Produce each record when its send time (seconds after ``start`` on ``clock``) comes.

    Returns once everything is acknowledged and ``end`` seconds (if given) have passed, or once
    ``stop()`` turned true (what was queued is still flushed). A record the cluster refuses raises
    :class:`~cadenza.infra.kafka.errors.DeliveryError` as soon as it is known, rather than after
    the run: a load generator that silently loses load falsifies a benchmark.
    """
    producer, errors = make_producer(settings)
    report = DeliveryReport()
    stats = LoadStats(planned_total=planned_total)
    next_progress = clock() + progress_interval
    stopped = stop or (lambda: False)

    def check() -> None:
        errors.raise_fatal()
        if report.failed:
            report.raise_if_failed()

    for item in planned:
        if stopped():
            break
        due = start + item.send_time
        now = clock()
        while now < due:
            # Sleep in short slices: stop() and delivery reports are served while waiting.
            producer.poll(0)
            sleep(min(due - now, 0.1))
            if stopped():
                break
            now = clock()
        if stopped():
            break
        stats.behind = max(stats.behind, now - due)
        _produce(producer, item, report)
        stats.queued[item.topic] = stats.queued.get(item.topic, 0) + 1
        if now >= next_progress:
            producer.poll(0)
            check()
            stats.delivered, stats.elapsed = report.delivered, now - start
            if on_progress is not None:
                on_progress(stats)
            next_progress = now + progress_interval
    if end is not None:
        # A run given a duration lasts it, even when a burst sent the last records early.
        while not stopped() and (now := clock()) < start + end:
            producer.poll(0)
            sleep(min(start + end - now, 0.1))
    flush_or_raise(producer, report, timeout=settings.delivery_timeout_ms / 1000 + 5)
    errors.raise_fatal()
    stats.delivered, stats.elapsed = report.delivered, clock() - start
    return stats


def run_load(
    settings: KafkaSettings,
    plan: LoadPlan,
    *,
    partitions: int | None = 4,
    stop: Callable[[], bool] | None = None,
    on_progress: Callable[[LoadStats], None] | None = None,
    progress_interval: float = 1.0,
) -> LoadStats:
    """Create the plan's topics (``partitions`` each, if missing; None: leave them) and produce it.

    The clicks' event time counts from the wall clock at the start, so windows line up with the
    time the records are really sent.
    """
    if partitions is not None:
        ensure_topics(make_admin(settings), [TopicSpec(t, partitions=partitions) for t in plan.topics])
    total = plan.count
    if plan.duration is not None:
        # Known without generating: records due before the end, per stream (bursts may send a few
        # early, so this is the steady-schedule figure, shown as the progress total only).
        by_duration = sum(math.ceil(plan.duration * s.rate) for s in plan.streams)
        total = by_duration if total is None else min(total, by_duration)
    epoch, start = time.time(), time.monotonic()
    return produce_planned(
        settings,
        plan.schedule(epoch),
        start=start,
        planned_total=total,
        end=plan.duration,
        stop=stop,
        on_progress=on_progress,
        progress_interval=progress_interval,
    )
