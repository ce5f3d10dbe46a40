"""The dashboard's live state: recent scrapes per worker, windowed numbers, a bounded history.

Counters and histograms are cumulative, so every number shown is a difference between the newest
scrape of a worker and its oldest one inside the window (``window_s``): the deadline-met ratio, the
p50/p99 latencies and the throughput are those of the last few seconds, not since the worker
started. Workers are added up per (tenant, pipeline). Each poll appends one point to a history of at
most ``history`` points, which is all the memory the dashboard keeps, and all a restart loses.

A worker that does not answer is *down* (with the reason) and drops out of the sums; one whose last
good scrape is older than ``stale_after_s`` is *stale*, and so is the whole view when polling stopped.
A pipeline no answering worker reports keeps its last numbers on the page, flagged stale.

Steps declared with ``parallel=`` are listed apart, per (tenant, pipeline, operator), once some
worker exports ``cadenza_lessees``: the lessees they hold now and their mean over the window
(lessee-seconds per second), leases and releases, timeouts, deaths and abandoned threads, the
hand-off per call (the growth of ``cadenza_lessee_handoff_seconds_total`` over that of
``cadenza_lessee_handed_calls_total``, summed over workers before dividing, so a busy worker weighs
more than an idle one) and the share of calls the lessees ran rather than the loop.

Workers are the ``--worker`` URLs, which stay for the dashboard's life, plus those a ``discovery``
callable (:class:`~cadenza.dashboard.discovery.DiscoveryReader`) announces at each poll: a newly
announced worker is polled from then on, one whose tombstone was read is dropped, and one whose
heartbeat is older than the reader's bound is shown *stale* even while its endpoint still answers
(it may have lost the broker).
"""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from cadenza.dashboard.discovery import DiscoveredWorker
from cadenza.dashboard.scrape import (
    LESSEE_COUNTERS,
    PipelineCounts,
    ScrapeError,
    Step,
    StepLessees,
    WorkerSnapshot,
    scrape_worker,
)
from cadenza.infra.metrics.quantiles import Buckets, bucket_delta, histogram_quantile
from cadenza.scheduling.clock import Clock, SystemClock

__all__ = ["Dashboard", "Scraper"]

Scraper = Callable[[str, float], WorkerSnapshot]
"""Fetches one worker's snapshot (``url``, ``now``); raises :class:`ScrapeError` when it cannot."""

Json = dict[str, Any]

Discovery = Callable[[float], Mapping[str, DiscoveredWorker]]
"""The workers announced at ``now``, by metrics URL (:meth:`DiscoveryReader.workers`)."""


@dataclass
class _Worker:
    url: str
    snapshots: deque[WorkerSnapshot] = field(default_factory=deque)
    last_ok: float | None = None
    error: str | None = None
    #: ``None`` for a ``--worker`` URL; else the newest announcement and its heartbeat's age.
    discovered: DiscoveredWorker | None = None


@dataclass
class _Window:
    """What happened on one worker (or all of them) between the window's two scrapes."""

    seconds: float = 0.0
    pipelines: dict[tuple[str, str], PipelineCounts] = field(default_factory=dict)
    lessees: dict[Step, StepLessees] = field(default_factory=dict)
    """Counters grown over the window; ``held`` is the newest gauge."""


@dataclass
class _StepSums:
    """One parallel step added up over the answering workers that run it."""

    held: float = 0.0
    grown: StepLessees = field(default_factory=StepLessees)
    total: StepLessees = field(default_factory=StepLessees)
    #: Per-second rates, each worker's growth over its own window: windows differ a little by worker.
    rates: dict[str, float] = field(default_factory=dict)
    timed: bool = False
    """Whether some worker had a window to take rates over (else the rates are unknown, not zero)."""


_LESSEE_RATES = ("leases", "releases", "seconds")


def _grow(before: float, now: float) -> float:
    return now if now < before else now - before  # a counter that fell: the worker restarted


def _lessee_growth(before: StepLessees, now: StepLessees) -> StepLessees:
    grown = StepLessees(held=now.held)
    for name in LESSEE_COUNTERS:
        setattr(grown, name, _grow(getattr(before, name), getattr(now, name)))
    return grown


def _add_lessees(into: StepLessees, more: StepLessees) -> None:
    for name in LESSEE_COUNTERS:
        setattr(into, name, getattr(into, name) + getattr(more, name))


def _add_buckets(into: Buckets, more: Buckets) -> None:
    for bound, count in more.items():
        into[bound] = into.get(bound, 0.0) + count


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000.0, 3)


class Dashboard:
    """Polls the workers and answers :meth:`view` (the JSON the page polls)."""

    def __init__(
        self,
        workers: Sequence[str],
        *,
        window_s: float = 10.0,
        stale_after_s: float = 5.0,
        deadline_goal: float = 0.99,
        history: int = 600,
        scrape_timeout_s: float = 2.0,
        clock: Clock | None = None,
        scraper: Scraper | None = None,
        extras: Callable[[], Json] | None = None,
        discovery: Discovery | None = None,
    ) -> None:
        if not workers and discovery is None:
            raise ValueError("the dashboard needs at least one worker URL (--worker) or a discovery topic")
        if window_s <= 0 or stale_after_s <= 0 or history < 2:
            raise ValueError("window_s and stale_after_s must be positive and history at least 2")
        if not 0.0 < deadline_goal <= 1.0:
            raise ValueError(f"deadline_goal is a ratio in (0, 1], got {deadline_goal!r}")
        self.window_s = window_s
        self.stale_after_s = stale_after_s
        self.deadline_goal = deadline_goal
        self._clock = clock or SystemClock()
        timeout = scrape_timeout_s
        self._scrape: Scraper = scraper or (lambda url, at: scrape_worker(url, at, timeout))
        self._extras = extras
        self._static = list(dict.fromkeys(workers))
        self._workers = [_Worker(url) for url in self._static]
        self._discovery = discovery
        self._history: deque[Json] = deque(maxlen=history)
        self._last_poll: float | None = None
        #: The last numbers of every pipeline seen, shown (flagged stale) while no worker reports it.
        self._last_rows: dict[tuple[str, str], Json] = {}
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="scrape")

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    # -- polling -----------------------------------------------------------------------------------

    def poll(self) -> None:
        """Scrape every worker once (concurrently) and append one point to the history."""
        now = self._clock.now()
        announced = self._discovery(now) if self._discovery is not None else None
        with self._lock:
            if announced is not None:
                self._follow(announced)
            workers = list(self._workers)
        results = list(self._pool.map(lambda w: self._scrape_one(w.url, now), workers))
        with self._lock:
            for worker, result in zip(workers, results, strict=True):
                if isinstance(result, WorkerSnapshot):
                    worker.snapshots.append(result)
                    worker.last_ok, worker.error = now, None
                    while len(worker.snapshots) > 2 and worker.snapshots[1].at <= now - self.window_s:
                        worker.snapshots.popleft()
                else:
                    worker.error = result
            self._last_poll = now
            self._history.append(self._point(now))

    def _follow(self, announced: Mapping[str, DiscoveredWorker]) -> None:
        """Add the newly announced workers, drop those whose tombstone came (never a ``--worker``)."""
        known = {worker.url: worker for worker in self._workers}
        kept = [worker for worker in self._workers if worker.url in self._static or worker.url in announced]
        for url, found in announced.items():
            worker = known.get(url)
            if worker is None:
                worker = _Worker(url)
                kept.append(worker)
            worker.discovered = found
        self._workers = kept

    def _scrape_one(self, url: str, now: float) -> WorkerSnapshot | str:
        try:
            return self._scrape(url, now)
        except ScrapeError as exc:
            return str(exc)

    def _up(self, worker: _Worker, now: float) -> bool:
        return (
            worker.error is None
            and worker.last_ok is not None
            and now - worker.last_ok <= self.stale_after_s
            and not (worker.discovered is not None and worker.discovered.stale)
        )

    # -- windowed numbers --------------------------------------------------------------------------

    def _window(self, worker: _Worker) -> _Window:
        newest = worker.snapshots[-1]
        oldest = worker.snapshots[0] if len(worker.snapshots) > 1 else WorkerSnapshot(at=newest.at)
        window = _Window(seconds=newest.at - oldest.at)
        for key, now in newest.pipelines.items():
            before = oldest.pipelines.get(key, PipelineCounts())
            window.pipelines[key] = PipelineCounts(
                consumed=_grow(before.consumed, now.consumed),
                met=_grow(before.met, now.met),
                missed=_grow(before.missed, now.missed),
                dead_lettered=_grow(before.dead_lettered, now.dead_lettered),
                target_s=now.target_s,
                e2e=bucket_delta(now.e2e, before.e2e),
                queue_wait=bucket_delta(now.queue_wait, before.queue_wait),
            )
        for step, lessees in newest.lessees.items():
            window.lessees[step] = _lessee_growth(oldest.lessees.get(step, StepLessees()), lessees)
        return window

    def _pipelines(self, now: float) -> list[Json]:
        summed: dict[tuple[str, str], PipelineCounts] = {}
        totals: dict[tuple[str, str], PipelineCounts] = {}
        rates: dict[tuple[str, str], float] = {}
        for worker in self._workers:
            if not worker.snapshots or not self._up(worker, now):
                continue
            window = self._window(worker)
            for key, delta in window.pipelines.items():
                into = summed.setdefault(key, PipelineCounts())
                into.consumed += delta.consumed
                into.met += delta.met
                into.missed += delta.missed
                into.dead_lettered += delta.dead_lettered
                into.target_s = delta.target_s if delta.target_s is not None else into.target_s
                _add_buckets(into.e2e, delta.e2e)
                _add_buckets(into.queue_wait, delta.queue_wait)
                if window.seconds > 0:
                    rates[key] = rates.get(key, 0.0) + delta.consumed / window.seconds
                total = totals.setdefault(key, PipelineCounts())
                cumulative = worker.snapshots[-1].pipelines[key]
                total.consumed += cumulative.consumed
                total.met += cumulative.met
                total.missed += cumulative.missed
        rows: list[Json] = []
        for (tenant, pipeline), counts in sorted(summed.items()):
            ratio = counts.met / counts.results if counts.results else None
            rows.append(
                {
                    "tenant": tenant,
                    "pipeline": pipeline,
                    "target_ms": _ms(counts.target_s),
                    "met_ratio": ratio,
                    "missing": ratio is not None and ratio < self.deadline_goal,
                    "p50_ms": _ms(histogram_quantile(0.5, counts.e2e)),
                    "p99_ms": _ms(histogram_quantile(0.99, counts.e2e)),
                    "queue_wait_p50_ms": _ms(histogram_quantile(0.5, counts.queue_wait)),
                    "queue_wait_p99_ms": _ms(histogram_quantile(0.99, counts.queue_wait)),
                    "throughput": rates.get((tenant, pipeline)),
                    "results_window": counts.results,
                    "dead_lettered_window": counts.dead_lettered,
                    "consumed_total": totals[(tenant, pipeline)].consumed,
                    "results_total": totals[(tenant, pipeline)].results,
                    "stale": False,
                }
            )
            self._last_rows[(tenant, pipeline)] = rows[-1]
        for key, last in sorted(self._last_rows.items()):
            if key not in summed:  # its workers are down or stale: its last numbers, flagged
                rows.append(last | {"stale": True, "missing": False, "throughput": None})
        return rows

    def _lessees(self, now: float) -> list[Json]:
        """One row per parallel step some answering worker exports ``cadenza_lessees`` for."""
        steps: dict[Step, _StepSums] = {}
        for worker in self._workers:
            if not worker.snapshots or not self._up(worker, now):
                continue
            window = self._window(worker)
            for step, grown in window.lessees.items():
                if grown.held is None:
                    continue
                sums = steps.setdefault(step, _StepSums())
                sums.held += grown.held
                _add_lessees(sums.grown, grown)
                _add_lessees(sums.total, worker.snapshots[-1].lessees[step])
                if window.seconds > 0:
                    sums.timed = True
                    for name in _LESSEE_RATES:
                        rate = getattr(grown, name) / window.seconds
                        sums.rates[name] = sums.rates.get(name, 0.0) + rate
        rows: list[Json] = []
        for (tenant, pipeline, operator), sums in sorted(steps.items()):
            grown, total = sums.grown, sums.total
            calls = grown.handed_calls + grown.lessor_calls
            handoff = grown.handoff_seconds / grown.handed_calls if grown.handed_calls > 0 else None
            rates: dict[str, float | None] = {
                name: sums.rates.get(name, 0.0) if sums.timed else None for name in _LESSEE_RATES
            }
            rows.append(
                {
                    "tenant": tenant,
                    "pipeline": pipeline,
                    "operator": operator,
                    "held": sums.held,
                    "mean_held": rates["seconds"],
                    "leases_rate": rates["leases"],
                    "releases_rate": rates["releases"],
                    "leases_total": total.leases,
                    "releases_total": total.releases,
                    "timeouts_window": grown.timeouts,
                    "deaths_window": grown.deaths,
                    "abandoned_window": grown.abandoned,
                    "timeouts_total": total.timeouts,
                    "deaths_total": total.deaths,
                    "abandoned_total": total.abandoned,
                    "handoff_us": None if handoff is None else round(handoff * 1e6, 3),
                    "calls_window": calls,
                    "lessee_share": grown.handed_calls / calls if calls > 0 else None,
                    "trouble": grown.timeouts + grown.deaths + grown.abandoned > 0,
                }
            )
        return rows

    def _worker_rows(self, now: float) -> list[Json]:
        rows: list[Json] = []
        for worker in self._workers:
            age = None if worker.last_ok is None else now - worker.last_ok
            found = worker.discovered
            error = worker.error
            if error is not None:
                status = "down"
            elif found is not None and found.stale:
                status = "stale"
                error = f"no heartbeat on the discovery topic for {found.heartbeat_age_s:.0f} s"
            elif worker.last_ok is None:
                status = "waiting"
            elif age is not None and age > self.stale_after_s:
                status = "stale"
            else:
                status = "up"
            row: Json = {"url": worker.url, "status": status, "error": error, "age_s": age}
            if found is not None:
                row |= {
                    "worker_id": found.announcement.worker_id,
                    "group": found.announcement.group,
                    "heartbeat_age_s": found.heartbeat_age_s,
                }
            if worker.snapshots and status == "up":
                newest = worker.snapshots[-1]
                oldest = worker.snapshots[0]
                seconds = newest.at - oldest.at
                busy = _grow(oldest.busy_seconds, newest.busy_seconds) / seconds if seconds > 0 else None
                partitions = sorted(set(newest.partition_buffered) | set(newest.consumer_lag))
                row |= {
                    "busy_share": None if busy is None else min(1.0, busy),
                    "buffered": newest.buffered,
                    "paused": newest.paused,
                    "restarts": newest.restarts,
                    "partitions": [
                        {
                            "topic": topic,
                            "partition": partition,
                            "buffered": newest.partition_buffered.get((topic, partition)),
                            "lag": newest.consumer_lag.get((topic, partition)),
                        }
                        for topic, partition in partitions
                    ],
                }
            rows.append(row)
        return rows

    def _point(self, now: float) -> Json:
        return {
            "t": now,
            "pipelines": {
                f"{row['tenant']}/{row['pipeline']}": {
                    key: row[key]
                    for key in (
                        "met_ratio",
                        "p50_ms",
                        "p99_ms",
                        "target_ms",
                        "queue_wait_p99_ms",
                        "throughput",
                    )
                }
                for row in self._pipelines(now)
                if not row["stale"]
            },
            "workers": {
                row["url"]: {key: row.get(key) for key in ("busy_share", "buffered", "paused")}
                for row in self._worker_rows(now)
            },
            "lessees": {
                f"{row['tenant']}/{row['pipeline']}/{row['operator']}": {
                    key: row[key] for key in ("held", "mean_held")
                }
                for row in self._lessees(now)
            },
        }

    # -- the page's JSON ---------------------------------------------------------------------------

    def view(self, since: float | None = None) -> Json:
        """Everything the page shows, as plain JSON (``NaN`` never appears: unknowns are ``null``).

        ``since``: only history points after this time (the page asks for what it has not drawn yet,
        instead of the whole history every second).
        """
        now = self._clock.now()
        with self._lock:
            last = self._last_poll
            view: Json = {
                "now": now,
                "last_poll": last,
                "stale": last is None or now - last > self.stale_after_s,
                "window_s": self.window_s,
                "stale_after_s": self.stale_after_s,
                "deadline_goal": self.deadline_goal,
                "workers": self._worker_rows(now),
                "pipelines": self._pipelines(now),
                "lessees": self._lessees(now),
                "history": [p for p in self._history if since is None or p["t"] > since],
                "history_max": self._history.maxlen,
            }
        view["extras"] = self._extras() if self._extras is not None else {}
        finite: Json = _finite(view)
        return finite


def _finite(value: Any) -> Any:
    """JSON has no NaN or infinity; a browser's JSON.parse would reject the whole answer."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_finite(item) for item in value]
    return value
