"""S5: what a pool change costs a live tenant while a large keyed state changes owner.

One worker process runs two pipelines (``s5_pipelines.py``): **BIG**, a keyed count over one-day
windows whose state holds one entry per key (``keys``: a million in full mode), and **LS**, S1's
latency-sensitive tenant (a 1 s tumbling count per user with a 0.3 s target). The harness preloads
BIG with every key, starts live traffic on both, then scales the pool out 1 -> 2 workers and back
in 2 -> 1, once per migration strategy, each on fresh topics, a fresh group and (unless
``--bootstrap`` names one) its own embedded broker:

- ``all_at_once``: the eager rebalance (``partition.assignment.strategy=range``): every partition
  is revoked, and each owner restores the state of all it is assigned inside the assignment
  callback before any of their records run;
- ``cooperative``: cooperative-sticky: only the partitions that move stop, and their new owner
  restores them in the callback;
- ``background``: the worker's default: cooperative-sticky, and the new owner restores in the
  background (``restore_slice``): each moved partition waits, paused, for its own state only, while
  the worker runs everything else (``cadenza.worker.kafka.restoring``).

- ``fluid``: plan ownership (``--ownership plan``, :mod:`cadenza.scaling.ownership`): no group
  rebalance; the harness places every partition on the first worker, and each scale moves the
  partitions that change owner (:func:`cadenza.scaling.balanced`: each topic's partitions spread
  evenly) one at a time by :func:`cadenza.scaling.plan` (``"fluid"``), each warm: the new owner reads
  the partition's state while the old one still runs it, and the partition stops only for the
  hand-over. The scale-in moves everything back to the first worker and then stops the second;
- ``matching``: the same, with the moves grouped into matchings (``plan(..., "matching")``).

A strategy is a :class:`Strategy` (how its workers are started and how it makes them move
partitions).

**The migration period** runs from the trigger (the second worker's process is started; the
leaving worker is sent SIGTERM) to the moment every input partition runs again at its new owner:
the workers' ``assigned``/``revoked``/``lost`` log lines, replayed in time order, give each
worker's ownership (under ``background`` a partition is ``assigned`` once its state is back and its
records run), and the period ends at the first line after which the workers that remain own
every partition the single worker owned before, each exactly once, and each of them owns some
(a strategy that decides where each partition goes gives that target instead, see
:meth:`Strategy.target`). A worker logs ``assigned`` only once the state of those partitions is
restored, so the restore is inside the period.

**Scoring.** LS latency of a window = its result's Kafka timestamp minus the window's end. The
period's figures cover the LS windows whose end falls in ``[start, end + 1 s]`` of either period
(those due while partitions moved, and the first after the hand-over); a window whose result never
came counts as a miss. ``results_correct``: after the last scale-in the harness closes BIG's
windows and compares every result with a brute-force count of the records in BIG's input topic,
read back (and compares those with what it sent, so that a record the broker never took is
reported as such rather than blamed on the workers): no window may be missing, unexpected or
short of records; a window counted higher (a record run twice across a hand-over) or emitted twice
is what at-least-once allows, and is counted (``overcounted_records``, ``duplicate_outputs``);
``results_exact`` says whether there was none.

    python benchmarks/scenarios/bench_migration.py --out DIR [--quick] [--keys N]
        [--strategies all_at_once,cooperative]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import runpy
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import suppress
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from _common import machine_and_commit, write_result
from bench_s1 import broker_settings
from confluent_kafka import OFFSET_BEGINNING, Producer, TopicPartition

from cadenza.infra.kafka.clients import make_admin, make_consumer, make_producer
from cadenza.infra.kafka.offsets import end_offsets
from cadenza.infra.kafka.topics import TopicSpec, ensure_topics
from cadenza.scaling.handover import PlanMover
from cadenza.scaling.migration import balanced
from cadenza.settings import KafkaSettings
from cadenza.worker.engine.topology import split

BENCH_DIR = Path(__file__).resolve().parent
#: BIG's event time: every record of a run falls in the one-day window starting here (day-aligned).
T0 = 86_400.0 * 4000
BIG_WINDOW_S = 86_400.0
#: LS's tumbling window (fixed in s5_pipelines.py).
LS_WINDOW_S = 1.0
#: The key of the records that close BIG's windows at the end (not a result the harness expects).
CLOSER_KEY = "close"
DEFAULT_STRATEGIES = ("all_at_once", "cooperative", "background", "fluid")
#: What plan ownership's moves are timed out after, per step (a move of BIG's largest partition
#: warms its whole changelog first).
PLAN_STEP_TIMEOUT_S = 600.0
Progress = Callable[[str], None]
Partition = tuple[str, int]
WindowKey = tuple[str, float]


@dataclass(frozen=True)
class MigrationConfig:
    #: Distinct keys in BIG's state (one window each).
    keys: int = 1_000_000
    ls_rate: float = 300.0
    users: int = 40
    #: Live BIG updates per second (random keys), beside LS.
    big_rate: float = 500.0
    ls_target: float = 0.3
    partitions: int = 4
    #: Seconds of steady load before the scale-out, between the migrations and after the scale-in.
    steady_s: float = 20.0
    #: Longest a migration may take before the run is called failed.
    migration_timeout_s: float = 900.0
    #: Longest the harness waits for BIG's preload to be processed and for the final results.
    preload_timeout_s: float = 1800.0
    drain_s: float = 300.0
    #: Longest the harness waits, after ``steady_s``, for LS to have no backlog (see ``settle``).
    settle_timeout_s: float = 300.0
    seed: int = 5
    strategies: tuple[str, ...] = DEFAULT_STRATEGIES
    #: ``linger.ms`` of the generator's producers. The broker pays per record batch
    #: (results/2026-11-28/NOTES.md, "The embedded broker pays per record batch"), so BIG's bulk input
    #: is batched; LS's records wait at most ``ls_linger_ms`` in the producer, which counts in their
    #: latency (sent-at to result).
    ls_linger_ms: int = 5
    big_linger_ms: int = 100
    #: ``CADENZA_LINGER_MS`` of the workers (their outputs, repartition topics and changelogs).
    worker_linger_ms: int = 5


def quick_config(**overrides: Any) -> MigrationConfig:
    """60k keys and short steady phases: a few minutes per strategy on 2 shared cores."""
    return MigrationConfig(
        **{
            "keys": 60_000,
            "steady_s": 8.0,
            "migration_timeout_s": 180.0,
            "preload_timeout_s": 300.0,
            "drain_s": 90.0,
            "settle_timeout_s": 90.0,
            **overrides,
        }
    )


# -- strategies ------------------------------------------------------------------------------------------


class Strategy:
    """How one migration strategy runs its workers and makes them move partitions.

    The default moves partitions through the consumer group: the scale-out starts a worker (the group
    rebalances when it joins) and the scale-in stops the newest (it leaves the group). A strategy
    that plans moves itself (``fluid``: ``cadenza.scaling.plan(current, target, "fluid")`` published
    to the workers) overrides :meth:`scale_out`/:meth:`scale_in`; either way each returns the
    trigger time, and the period ends when the workers' logs show the new ownership complete.
    """

    name: str

    def worker_args(self) -> list[str]:
        """Extra arguments of ``s5_worker.py`` for this strategy's workers."""
        return []

    def env(self) -> dict[str, str]:
        """Extra environment of this strategy's workers."""
        return {}

    def start(self, run: Run) -> float:
        """Start the first worker."""
        return run.start_worker()

    def scale_out(self, run: Run) -> float:
        return run.start_worker()

    def scale_in(self, run: Run) -> float:
        return run.stop_newest()

    def target(self, run: Run, workers: Sequence[str]) -> dict[str, set[Partition]] | None:
        """Where each partition ends up after the migration to ``workers``, if the strategy decides
        it (None: the group's assignor does, and any complete division ends the migration)."""
        return None

    def check(self) -> None:
        """Raise what went wrong in a migration the strategy drives itself (polled while waiting)."""

    def details(self) -> dict[str, Any]:
        """What the strategy measured itself, for its ``migration.json`` entry."""
        return {}

    def close(self) -> None:
        """Release what the strategy holds for the run (called when the run ends)."""


@dataclass(frozen=True)
class GroupRebalance(Strategy):
    """Moves by the group protocol with librdkafka's ``assignment`` assignor; the new owner restores
    inside the assignment callback (``restore_slice`` 0) or in the background, a slice at a time."""

    name: str
    assignment: str
    restore_slice: float = 0.0

    def worker_args(self) -> list[str]:
        return ["--assignment", self.assignment, "--restore-slice", str(self.restore_slice)]


class PlanMoves(Strategy):
    """Moves by the ownership plan (``--ownership plan``): the harness is the pool controller. It
    places every input partition on the first worker, and each scale moves what changes owner by
    ``plan(current, balanced(...), migration)`` in a thread (the trigger returns at once; the period
    ends when the workers' logs show the target). The scale-in stops the second worker once it owns
    nothing."""

    def __init__(self, name: str, migration: str) -> None:
        self.name = name
        self.migration = migration
        self._mover: PlanMover | None = None
        self._moving: threading.Thread | None = None
        self._target: dict[Partition, str] = {}
        #: What the last migration raised, if it did (re-raised by the next call).
        self.failure: BaseException | None = None
        #: Per scale, each step's partitions and seconds.
        self.steps: dict[str, list[dict[str, Any]]] = {}

    def worker_args(self) -> list[str]:
        return ["--assignment", "cooperative-sticky", "--restore-slice", "0.01", "--ownership", "plan"]

    def start(self, run: Run) -> float:
        if self._mover is not None:
            self._mover.close()
        self._mover = PlanMover(run.settings, run.group, step_timeout=PLAN_STEP_TIMEOUT_S)
        self.steps = {}
        partitions = input_partitions(run)
        self._mover.place(dict.fromkeys(partitions, "w1"))
        self._target = dict.fromkeys(partitions, "w1")
        return run.start_worker()

    def scale_out(self, run: Run) -> float:
        at = run.start_worker()
        self._move(run, ["w1", "w2"], "scale_out", then=None)
        return at

    def scale_in(self, run: Run) -> float:
        at = time.time()
        self._move(run, ["w1"], "scale_in", then=run.stop_newest)
        return at

    def _move(self, run: Run, workers: list[str], scale: str, then: Callable[[], object] | None) -> None:
        mover = self._mover
        if mover is None:
            raise RuntimeError("PlanMoves.start was not called")
        self._wait_moving()
        self._target = balanced(mover.owners(), workers)

        def move() -> None:
            try:
                done = mover.migrate(self._target, self.migration)
                self.steps[scale] = [
                    {"moves": [f"{t}[{p}]->{w}" for (t, p), w in moves.items()], "seconds": round(took, 3)}
                    for moves, took in done
                ]
                if then is not None:
                    then()
            except BaseException as exc:
                self.failure = exc

        self._moving = threading.Thread(target=move, name=f"s5-{scale}", daemon=True)
        self._moving.start()

    def _wait_moving(self) -> None:
        if self._moving is not None:
            self._moving.join()
            self._moving = None
        self.check()

    def check(self) -> None:
        if self.failure is not None:
            failure, self.failure = self.failure, None
            raise failure

    def details(self) -> dict[str, Any]:
        return {"plan_steps": self.steps}

    def close(self) -> None:
        if self._moving is not None:
            self._moving.join(PLAN_STEP_TIMEOUT_S)
            self._moving = None
        if self._mover is not None:
            self._mover.close()
            self._mover = None

    def target(self, run: Run, workers: Sequence[str]) -> dict[str, set[Partition]] | None:
        owned: dict[str, set[Partition]] = {worker: set() for worker in workers}
        for partition, worker in self._target.items():
            owned.setdefault(worker, set()).add(partition)
        return owned


def input_partitions(run: Run) -> list[Partition]:
    """Every input partition of the run's pipelines (their sources' and repartition topics'), which
    the plan must give owners: the pipelines are compiled with the run's ``S5_*`` settings."""
    saved = dict(os.environ)
    try:
        os.environ.update(run.pipeline_env())
        module = runpy.run_path(str(BENCH_DIR / "s5_pipelines.py"))
    finally:
        os.environ.clear()
        os.environ.update(saved)
    topics = dict.fromkeys(sub.input_topic for name in ("big", "ls") for sub in split(module[name].compile()))
    return [(topic, p) for topic in topics for p in range(run.config.partitions)]


STRATEGIES: dict[str, Strategy] = {
    "all_at_once": GroupRebalance("all_at_once", "range"),
    "cooperative": GroupRebalance("cooperative", "cooperative-sticky"),
    "background": GroupRebalance("background", "cooperative-sticky", restore_slice=0.01),
    "fluid": PlanMoves("fluid", "fluid"),
    "matching": PlanMoves("matching", "matching"),
}


def choose_strategies(names: Sequence[str]) -> tuple[list[Strategy], dict[str, str]]:
    """The runnable strategies among ``names``, and why each other one is skipped."""
    chosen: list[Strategy] = []
    skipped: dict[str, str] = {}
    for name in names:
        if name in STRATEGIES:
            chosen.append(STRATEGIES[name])
        else:
            skipped[name] = f"unknown strategy; known: {', '.join(STRATEGIES)}"
    return chosen, skipped


# -- the workers' logs: who owns what, when ------------------------------------------------------------

_OWNERSHIP = re.compile(r"^(\d+(?:\.\d+)?) cadenza\.worker INFO (assigned|revoked|lost) (.*)$")
_RESTORED = re.compile(
    r"^(\d+(?:\.\d+)?) cadenza\.worker INFO restored (\S+)\[(\d+)\]: (\d+) keys from (\d+) changelog records"
)
_PARTITION = re.compile(r"([^\s,\[\]()]+)\[(\d+)\]")
_GC_PAUSE = re.compile(
    r"^(\d+(?:\.\d+)?) cadenza\.worker WARNING a full garbage collection stopped the worker for (\d+) ms"
)


@dataclass(frozen=True)
class OwnershipEvent:
    at: float
    worker: str
    kind: Literal["assigned", "revoked", "lost"]
    partitions: frozenset[Partition]


@dataclass(frozen=True)
class RestoreEvent:
    at: float
    worker: str
    partition: Partition
    keys: int
    records: int


def parse_log(worker: str, lines: Iterable[str]) -> tuple[list[OwnershipEvent], list[RestoreEvent]]:
    """The ownership changes and restores one worker logged (``s5_worker.py``'s line format)."""
    owned: list[OwnershipEvent] = []
    restored: list[RestoreEvent] = []
    for line in lines:
        match = _OWNERSHIP.match(line.rstrip("\n"))
        if match is not None:
            at, kind, rest = match.groups()
            if kind in {"revoked", "lost"}:
                rest = rest.split(" (", 1)[0]  # "(N queued record(s) handed back)"
            parts = frozenset((topic, int(p)) for topic, p in _PARTITION.findall(rest))
            owned.append(OwnershipEvent(float(at), worker, kind, parts))  # type: ignore[arg-type]
            continue
        found = _RESTORED.match(line)
        if found is not None:
            at, topic, partition, keys, records = found.groups()
            restored.append(RestoreEvent(float(at), worker, (topic, int(partition)), int(keys), int(records)))
    return owned, restored


def collector_pauses(worker: str, lines: Iterable[str]) -> list[tuple[str, float, float]]:
    """``(worker, when, ms)`` of each long full garbage collection the worker logged."""
    found = (_GC_PAUSE.match(line) for line in lines)
    return [(worker, float(m.group(1)), float(m.group(2))) for m in found if m is not None]


def ownership(events: Iterable[OwnershipEvent], until: float) -> dict[str, set[Partition]]:
    """Each worker's partitions after replaying the events up to and including ``until``."""
    owners: dict[str, set[Partition]] = {}
    for event in sorted(events, key=lambda e: e.at):
        if event.at > until:
            break
        owned = owners.setdefault(event.worker, set())
        if event.kind == "assigned":
            owned |= event.partitions
        else:
            owned -= event.partitions
    return owners


def complete(
    owners: Mapping[str, set[Partition]], workers: Iterable[str], partitions: set[Partition]
) -> bool:
    """Whether ``workers`` own every partition exactly once between them, each owning some."""
    sets = [owners.get(worker, set()) for worker in workers]
    return all(sets) and sum(len(s) for s in sets) == len(partitions) and set().union(*sets) == partitions


def migration_end(
    events: Iterable[OwnershipEvent],
    trigger: float,
    workers: Iterable[str],
    partitions: set[Partition],
    target: Mapping[str, set[Partition]] | None = None,
) -> float | None:
    """When the migration started at ``trigger`` was over: the first ownership change at or after it
    after which ``workers`` own ``partitions`` completely (see :func:`complete`), or, when the
    strategy knows where each partition goes (``target``: worker -> partitions), own exactly that
    (a fluid migration is complete after every step, but over only after the last); None if not yet.
    """
    remaining = list(workers)
    owners: dict[str, set[Partition]] = {}
    for event in sorted(events, key=lambda e: e.at):
        owned = owners.setdefault(event.worker, set())
        if event.kind == "assigned":
            owned |= event.partitions
        else:
            owned -= event.partitions
        if event.at < trigger:
            continue
        if target is None:
            if complete(owners, remaining, partitions):
                return event.at
        elif all(owners.get(worker, set()) == set(target.get(worker, ())) for worker in remaining):
            return event.at
    return None


# -- brute force and scoring -------------------------------------------------------------------------------


def window_start(ts: float, size: float) -> float:
    return math.floor(ts / size) * size


def brute_force_counts(records: Iterable[tuple[str, float]], size: float) -> dict[WindowKey, int]:
    """Every (key, window start) and how many of ``records`` (key, event time) fall in it."""
    counts: Counter[WindowKey] = Counter()
    for key, ts in records:
        counts[(key, window_start(ts, size))] += 1
    return dict(counts)


def check_windows(
    expected: Mapping[WindowKey, int], outputs: Iterable[tuple[str, float, int]]
) -> dict[str, Any]:
    """Window results ``(key, window start, count)`` against the brute force.

    Correct: every expected window came, none other did, and none counted fewer records than were
    sent. What at-least-once allows is counted, not failed: a window emitted again
    (``duplicate_outputs``) and records counted twice (``overcounted_records``, the excess summed
    over windows, at each window's highest count).
    """
    highest: dict[WindowKey, int] = {}
    lowest: dict[WindowKey, int] = {}
    duplicates = 0
    unexpected = 0
    for key, start, count in outputs:
        window = (key, start)
        if window not in expected:
            unexpected += 1
            continue
        if window in highest:
            duplicates += 1
            highest[window] = max(highest[window], count)
            lowest[window] = min(lowest[window], count)
        else:
            highest[window] = lowest[window] = count
    missing = sum(1 for window in expected if window not in highest)
    short = sum(1 for window, count in lowest.items() if count < expected[window])
    overcounted = sum(max(0, count - expected[window]) for window, count in highest.items())
    correct = missing == 0 and short == 0 and unexpected == 0
    return {
        "windows_expected": len(expected),
        "windows_received": len(highest),
        "missing_windows": missing,
        "short_windows": short,
        "unexpected_windows": unexpected,
        "duplicate_outputs": duplicates,
        "overcounted_records": overcounted,
        "results_correct": correct,
        "results_exact": correct and duplicates == 0 and overcounted == 0,
    }


@dataclass(frozen=True)
class LsResult:
    key: str
    window_start: float
    window_end: float
    count: int
    emitted: float  # the result's Kafka timestamp


def ls_latencies(
    results: Iterable[LsResult], expected: Mapping[WindowKey, int]
) -> tuple[dict[WindowKey, float], int]:
    """Per expected LS window, the latency of its first result with the right count (seconds after the
    window's end); and how many expected windows only came with a wrong count."""
    latencies: dict[WindowKey, float] = {}
    wrong: set[WindowKey] = set()
    for result in sorted(results, key=lambda r: r.emitted):
        window = (result.key, result.window_start)
        if window not in expected or window in latencies:
            continue
        if result.count != expected[window]:
            wrong.add(window)
            continue
        latencies[window] = result.emitted - result.window_end
    return latencies, len(wrong - set(latencies))


def percentile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 2)


def score_periods(
    latencies: Mapping[WindowKey, float],
    expected: Iterable[WindowKey],
    periods: Sequence[tuple[float, float]],
    target: float,
    window: float = LS_WINDOW_S,
) -> dict[str, Any]:
    """LS during the migration periods: the expected windows whose end falls in ``[start, end +
    window]`` of any period. A window without a (correct) result is a miss; max and p99 are over the
    results that came."""
    during = [
        key for key in expected if any(start <= key[1] + window <= end + window for start, end in periods)
    ]
    got = [latencies[key] for key in during if key in latencies]
    met = sum(1 for latency in got if latency <= target)
    return {
        "ls_max_ms": _ms(max(got)) if got else None,
        "ls_p99_ms": _ms(percentile(got, 0.99)),
        "ls_deadline_met_ratio": round(met / len(during), 4) if during else None,
        "ls_windows": len(during),
        "ls_missing": len(during) - len(got),
    }


def expected_ls_windows(sends: Iterable[tuple[str, float]], last_ts: float) -> dict[WindowKey, int]:
    """LS windows (user, start) and their counts, for windows that close at least a window before the
    input ends (later records exist to move the watermark past them)."""
    counts = brute_force_counts(sends, LS_WINDOW_S)
    return {key: n for key, n in counts.items() if key[1] + 2 * LS_WINDOW_S <= last_ts}


def back_on_target(
    latencies: Mapping[WindowKey, float],
    expected: Iterable[WindowKey],
    end: float,
    horizon: float,
    target: float,
    *,
    window: float = LS_WINDOW_S,
) -> float:
    """Seconds from a migration's end to the end of the last LS window before ``horizon`` that
    missed its target (late or missing): how long the backlog the migration left took to drain.
    0 when every window ending after the migration was on time."""
    late = [
        key[1] + window
        for key in expected
        if end <= key[1] + window < horizon and latencies.get(key, math.inf) > target
    ]
    return round(max(late) - end, 3) if late else 0.0


def strategy_entry(
    periods: Mapping[str, tuple[float, float | None]],
    latencies: Mapping[WindowKey, float],
    expected_ls: Mapping[WindowKey, int],
    big_check: Mapping[str, Any],
    target: float,
    *,
    baseline: tuple[float, float],
) -> dict[str, Any]:
    """One strategy's figures: the issue's five, pooled over both migrations (``periods``, in
    order), then the detail: each migration on its own, how long LS took to be back on target after
    it, and LS's p99 over the steady ``baseline`` interval (window ends) before the first one."""
    finished = [(start, end) for start, end in periods.values() if end is not None]
    pooled = score_periods(latencies, expected_ls, finished, target)
    phases: dict[str, Any] = {}
    starts = [start for start, _ in periods.values()]
    for index, (name, (start, end)) in enumerate(periods.items()):
        phase: dict[str, Any] = {"start": round(start, 3), "end": None if end is None else round(end, 3)}
        phase["duration_s"] = None if end is None else round(end - start, 3)
        if end is not None:
            phase.update(score_periods(latencies, expected_ls, [(start, end)], target))
            horizon = starts[index + 1] if index + 1 < len(starts) else math.inf
            phase["ls_back_on_target_s"] = back_on_target(latencies, expected_ls, end, horizon, target)
        phases[name] = phase
    steady = [
        latency for key, latency in latencies.items() if baseline[0] <= key[1] + LS_WINDOW_S < baseline[1]
    ]
    durations = [p["duration_s"] for p in phases.values()]
    return {
        "ls_max_ms": pooled["ls_max_ms"],
        "ls_p99_ms": pooled["ls_p99_ms"],
        "ls_deadline_met_ratio": pooled["ls_deadline_met_ratio"],
        "duration_s": None if None in durations else round(sum(durations), 3),
        "results_correct": bool(big_check["results_correct"]) and len(finished) == len(periods),
        "results_exact": bool(big_check["results_exact"]),
        "ls_windows_during": pooled["ls_windows"],
        "ls_missing_during": pooled["ls_missing"],
        "ls_p99_before_ms": _ms(percentile(steady, 0.99)),
        "phases": phases,
        "big": dict(big_check),
    }


REQUIRED = ("ls_max_ms", "ls_p99_ms", "ls_deadline_met_ratio", "duration_s", "results_correct")


def check_shape(result: Mapping[str, Any]) -> None:
    """Raise ValueError unless ``result`` has the shape issue 21 gives ``migration.json``."""
    for key in ("strategies", "machine", "commit"):
        if key not in result:
            raise ValueError(f"migration.json lacks {key!r}")
    for name, entry in result["strategies"].items():
        missing = [key for key in REQUIRED if key not in entry]
        if missing:
            raise ValueError(f"strategy {name!r} lacks {missing}")


# -- one run -------------------------------------------------------------------------------------------


@dataclass
class Topics:
    big_in: str
    big_out: str
    ls_in: str
    ls_out: str

    @classmethod
    def fresh(cls, run: str) -> Topics:
        return cls(f"s5-{run}-big-in", f"s5-{run}-big-out", f"s5-{run}-ls-in", f"s5-{run}-ls-out")


class OutputReader:
    """Reads both output topics from the beginning in a thread, keeping only what scoring needs."""

    def __init__(self, settings: KafkaSettings, topics: Topics, partitions: int) -> None:
        self.topics = topics
        self.ls: list[LsResult] = []
        self.big: list[tuple[str, float, int]] = []
        self._stop = threading.Event()
        self._consumer, _ = make_consumer(settings, f"s5-reader-{uuid.uuid4().hex[:8]}")
        self._consumer.assign(
            [
                TopicPartition(topic, p, OFFSET_BEGINNING)
                for topic in (topics.ls_out, topics.big_out)
                for p in range(partitions)
            ]
        )
        self._thread = threading.Thread(target=self._run, name="s5-reader", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for message in self._consumer.consume(1000, 0.1):
                if message.error() is not None:
                    continue
                try:
                    value = json.loads(message.value() or b"null")
                    key, start, count = str(value["key"]), float(value["window_start"]), int(value["value"])
                except (ValueError, KeyError, TypeError):
                    continue
                if message.topic() == self.topics.big_out:
                    if key != CLOSER_KEY:
                        self.big.append((key, start, count))
                else:
                    emitted = message.timestamp()[1] / 1000.0
                    self.ls.append(LsResult(key, start, float(value["window_end"]), count, emitted))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._consumer.close()


@dataclass
class Run:
    """The worker processes of one strategy's run and their logs."""

    strategy: Strategy
    settings: KafkaSettings
    topics: Topics
    run_id: str
    config: MigrationConfig
    logs: Path
    processes: list[tuple[str, subprocess.Popen[bytes]]] = field(default_factory=list)
    started: int = 0

    @property
    def group(self) -> str:
        return f"s5-{self.run_id}"

    def log_path(self, worker: str) -> Path:
        return self.logs / f"{self.run_id}-{worker}.log"

    def pipeline_env(self) -> dict[str, str]:
        """What ``s5_pipelines.py`` reads: this run's topics and LS target."""
        return {
            "S5_RUN": self.run_id,
            "S5_BIG_IN": self.topics.big_in,
            "S5_BIG_OUT": self.topics.big_out,
            "S5_LS_IN": self.topics.ls_in,
            "S5_LS_OUT": self.topics.ls_out,
            "S5_LS_TARGET": str(self.config.ls_target),
        }

    def start_worker(self) -> float:
        """Start one more worker; returns when its process was started."""
        self.started += 1
        worker = f"w{self.started}"
        env = {
            **os.environ,
            **self.strategy.env(),
            "CADENZA_BOOTSTRAP_SERVERS": self.settings.bootstrap_servers,
            "CADENZA_LINGER_MS": str(self.config.worker_linger_ms),
            **self.pipeline_env(),
        }
        command = [
            sys.executable,
            str(BENCH_DIR / "s5_worker.py"),
            "--group",
            self.group,
            "--worker-id",
            worker,
            *self.strategy.worker_args(),
        ]
        self.logs.mkdir(parents=True, exist_ok=True)
        log = self.log_path(worker).open("wb")
        at = time.time()
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=BENCH_DIR.parents[1]
        )
        self.processes.append((worker, process))
        return at

    def stop_newest(self) -> float:
        """SIGTERM the newest running worker (it commits, leaves the group and exits)."""
        for _worker, process in reversed(self.processes):
            if process.poll() is None:
                at = time.time()
                process.send_signal(signal.SIGTERM)
                return at
        raise RuntimeError("no running worker to stop")

    def running(self) -> list[str]:
        return [worker for worker, process in self.processes if process.poll() is None]

    def check_alive(self, workers: Iterable[str]) -> None:
        for worker, process in self.processes:
            if worker in workers and process.poll() is not None:
                raise RuntimeError(
                    f"worker {worker} exited with {process.returncode}; see {self.log_path(worker)}"
                )

    def events(self) -> tuple[list[OwnershipEvent], list[RestoreEvent]]:
        owned: list[OwnershipEvent] = []
        restored: list[RestoreEvent] = []
        for worker, _process in self.processes:
            path = self.log_path(worker)
            with suppress(OSError):
                o, r = parse_log(worker, path.read_text(errors="replace").splitlines())
                owned += o
                restored += r
        return owned, restored

    def collector_pauses(self) -> list[tuple[str, float, float]]:
        pauses: list[tuple[str, float, float]] = []
        for worker, _process in self.processes:
            with suppress(OSError):
                pauses += collector_pauses(
                    worker, self.log_path(worker).read_text(errors="replace").splitlines()
                )
        return pauses

    def stop_all(self) -> None:
        for _worker, process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for _worker, process in self.processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)


class LiveInput:
    """LS clicks and BIG updates at their rates in a thread, remembering what it sent.

    The producers are idempotent: when the broker is slow, librdkafka's retries must not write a
    record twice (BIG's brute force would then be short of it). A record whose delivery fails is
    counted (``failures``): the brute force cannot know whether it is in the topic. One producer per
    tenant, so that BIG's batching (``big_linger_ms``) never holds an LS record back.
    """

    def __init__(self, settings: KafkaSettings, topics: Topics, config: MigrationConfig) -> None:
        self.topics = topics
        self.config = config
        self.ls_sends: list[tuple[str, float]] = []
        self.big_sends: list[tuple[str, float]] = []
        self.failures = 0
        self.error: BaseException | None = None
        self._ls_producer, _ = make_producer(settings, **{"linger.ms": config.ls_linger_ms})
        self._big_producer, _ = make_producer(settings, **{"linger.ms": config.big_linger_ms})
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="s5-input", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _delivered(self, error: object, _message: object) -> None:
        if error is not None:
            self.failures += 1

    def _send(self, producer: Producer, topic: str, value: dict[str, Any], key: str) -> None:
        while True:
            try:
                producer.produce(topic, json.dumps(value).encode(), key.encode(), on_delivery=self._delivered)
                return
            except BufferError:  # the local queue is full while the broker is slow: wait for room
                producer.poll(0.05)

    def _run(self) -> None:
        try:
            rng = random.Random(self.config.seed)
            started = time.monotonic()
            while not self._stop.is_set():
                elapsed = time.monotonic() - started
                for _ in range(int(elapsed * self.config.ls_rate) - len(self.ls_sends)):
                    user = f"u{rng.randrange(self.config.users)}"
                    ts = time.time()
                    self._send(self._ls_producer, self.topics.ls_in, {"user": user, "ts": ts}, user)
                    self.ls_sends.append((user, ts))
                for _ in range(int(elapsed * self.config.big_rate) - len(self.big_sends)):
                    key = f"k{rng.randrange(self.config.keys)}"
                    ts = T0 + 10.0 + elapsed  # inside the day window, after the preload's event times
                    self._send(self._big_producer, self.topics.big_in, {"key": key, "ts": ts}, key)
                    self.big_sends.append((key, ts))
                self._ls_producer.poll(0)
                self._big_producer.poll(0)
                self._stop.wait(0.005)
            self.failures += self._ls_producer.flush(60) + self._big_producer.flush(60)
        except BaseException as exc:  # said in the result: a silent sender would fake a quiet input
            self.error = exc

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(90)


def preload(settings: KafkaSettings, topic: str, keys: int) -> list[tuple[str, float]]:
    """One record per key, event times rising inside BIG's window; returns what it sent."""
    producer, _ = make_producer(settings, **{"linger.ms": 20})
    failed: list[object] = []
    sent: list[tuple[str, float]] = []
    for i in range(keys):
        key = f"k{i}"
        ts = T0 + 5.0 * i / keys
        while True:
            try:
                producer.produce(
                    topic,
                    json.dumps({"key": key, "ts": ts}).encode(),
                    key.encode(),
                    on_delivery=lambda error, _m: failed.append(error) if error is not None else None,
                )
                break
            except BufferError:
                producer.poll(0.05)
        sent.append((key, ts))
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(120) or failed:
        raise RuntimeError(f"the preload was not delivered: {failed[:1] or 'flush timed out'}")
    return sent


def committed_through(settings: KafkaSettings, group: str, ends: Mapping[Partition, int]) -> bool:
    consumer, _ = make_consumer(settings, group)
    try:
        committed = consumer.committed([TopicPartition(t, p) for t, p in ends], timeout=10)
    finally:
        consumer.close()
    done = {(tp.topic, tp.partition): tp.offset for tp in committed}
    return all(done.get(tp, -1) >= end for tp, end in ends.items())


def wait_for(  # noqa: PLR0917 - internal helper, every call names what it waits for
    predicate: Callable[[], bool],
    timeout: float,
    what: str,
    run: Run,
    workers: Sequence[str],
    progress: Progress,
    interval: float = 0.2,
) -> None:
    """Poll ``predicate`` until true, failing if a worker exits or ``timeout`` passes; says every
    30 s that it still waits (a full-mode preload takes minutes)."""
    started = time.monotonic()
    said = started
    while not predicate():
        run.check_alive(workers)
        now = time.monotonic()
        if now - started > timeout:
            raise RuntimeError(f"{what} did not happen within {timeout:.0f} s")
        if now - said >= 30.0:
            progress(f"  still waiting for {what} ({now - started:.0f} s)")
            said = now
        time.sleep(interval)


def wait_for_migration(  # noqa: PLR0917 - internal helper, two call sites
    run: Run,
    trigger: float,
    workers: Sequence[str],
    partitions: set[Partition],
    target: Mapping[str, set[Partition]] | None,
    timeout: float,
) -> float | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run.check_alive(workers)
        run.strategy.check()
        end = migration_end(run.events()[0], trigger, workers, partitions, target)
        if end is not None:
            return end
        time.sleep(0.2)
    return None


def run_strategy(
    strategy: Strategy, settings: KafkaSettings, config: MigrationConfig, out: Path, progress: Progress
) -> dict[str, Any]:
    run_id = uuid.uuid4().hex[:8]
    topics = Topics.fresh(run_id)
    ensure_topics(
        make_admin(settings), [TopicSpec(name, config.partitions) for name in asdict(topics).values()]
    )
    run = Run(strategy, settings, topics, run_id, config, out / "logs")
    name = strategy.name
    progress(f"{name}: preloading {config.keys:,} keys (run {run_id})")
    preloaded = preload(settings, topics.big_in, config.keys)
    ends = end_offsets(settings, [(topics.big_in, p) for p in range(config.partitions)])
    reader = OutputReader(settings, topics, config.partitions)
    live = LiveInput(settings, topics, config)
    periods: dict[str, tuple[float, float | None]] = {}
    try:
        began = time.time()
        strategy.start(run)
        wait_for(
            lambda: committed_through(settings, run.group, ends),
            config.preload_timeout_s,
            "processing the preload",
            run,
            ["w1"],
            progress,
            interval=1.0,
        )
        progress(f"{name}: w1 holds the state ({time.time() - began:.1f} s from its start)")
        live.start()
        wait_for(lambda: bool(reader.ls), 120, "a first LS result", run, ["w1"], progress)
        settle(reader, config, progress, name)
        owned, _ = run.events()
        partitions = ownership(owned, time.time()).get("w1", set())
        progress(f"{name}: scale out 1 -> 2 ({len(partitions)} input partitions)")
        trigger = strategy.scale_out(run)
        workers = ["w1", "w2"]
        end = wait_for_migration(
            run, trigger, workers, partitions, strategy.target(run, workers), config.migration_timeout_s
        )
        periods["scale_out"] = (trigger, end)
        progress(f"{name}: scale-out migration " + _took(trigger, end))
        settle(reader, config, progress, name)
        progress(f"{name}: scale in 2 -> 1")
        trigger = strategy.scale_in(run)
        end = wait_for_migration(
            run, trigger, ["w1"], partitions, strategy.target(run, ["w1"]), config.migration_timeout_s
        )
        periods["scale_in"] = (trigger, end)
        progress(f"{name}: scale-in migration " + _took(trigger, end))
        settle(reader, config, progress, name)
        live.stop()
        close_windows(settings, topics.big_in, config.partitions)
        # The brute force counts what the input topic holds (read back, so a record the broker
        # never took is not blamed on the workers); what the harness sent is compared with it too.
        in_topic = read_back(settings, topics.big_in, config.partitions)
        big_expected = brute_force_counts(in_topic, BIG_WINDOW_S)
        sent = brute_force_counts([*preloaded, *live.big_sends], BIG_WINDOW_S)
        input_check = compare_input(sent, big_expected)
        last_ls = max(ts for _, ts in live.ls_sends)
        ls_expected = expected_ls_windows(live.ls_sends, last_ls)
        progress(f"{name}: closing BIG's windows; waiting for {len(big_expected):,} results")
        deadline = time.monotonic() + config.drain_s
        said = time.monotonic()
        while time.monotonic() < deadline:
            received = len({(k, s) for k, s, _ in list(reader.big)})
            if received >= len(big_expected):
                break
            if time.monotonic() - said >= 30.0:
                progress(f"  {received:,} of {len(big_expected):,} results so far")
                said = time.monotonic()
            time.sleep(1.0)
    finally:
        live.stop()
        run.stop_all()
        reader.close()
        strategy.close()
    _owned, restores = run.events()
    latencies, ls_wrong = ls_latencies(reader.ls, ls_expected)
    first = periods["scale_out"][0]
    entry = strategy_entry(
        periods,
        latencies,
        ls_expected,
        check_windows(big_expected, reader.big),
        config.ls_target,
        baseline=(first - config.steady_s, first),
    )
    entry["restored_keys"] = sum(r.keys for r in restores if r.at >= periods["scale_out"][0])
    entry["restored_records"] = sum(r.records for r in restores if r.at >= periods["scale_out"][0])
    entry["ls_wrong_windows"] = ls_wrong
    # Full collections that stopped a worker for 100 ms or more (its warning), seconds after the start.
    entry["gc_long_pauses"] = [[w, round(at - began, 1), ms] for w, at, ms in run.collector_pauses()]
    entry.update(strategy.details())
    entry["input_delivery_failures"] = live.failures
    entry["input"] = input_check
    if live.error is not None:
        entry["input_error"] = repr(live.error)
        entry["results_correct"] = False
    entry["series"] = {
        "run_start": round(began, 3),
        "ls": sorted(
            (round(key[1] + LS_WINDOW_S - began, 3), round(lat * 1000, 2)) for key, lat in latencies.items()
        ),
    }
    progress(
        f"{name}: LS during migrations max {_fmt(entry['ls_max_ms'])} ms, p99 {_fmt(entry['ls_p99_ms'])} ms, "
        f"met {_ratio(entry['ls_deadline_met_ratio'])}; results correct: {entry['results_correct']}"
    )
    return entry


def settle(reader: OutputReader, config: MigrationConfig, progress: Progress, name: str) -> None:
    """Let the pool run ``steady_s``, then until LS has no backlog: the LS results of the last 2 s
    are each under a second late (bounded by ``settle_timeout_s``), so that the next migration
    starts from a steady state rather than the previous one's catch-up."""
    time.sleep(config.steady_s)
    deadline = time.monotonic() + config.settle_timeout_s
    while time.monotonic() < deadline:
        now = time.time()
        recent = [r.emitted - r.window_end for r in list(reader.ls) if r.emitted >= now - 2.0]
        if recent and max(recent) < 1.0:
            return
        time.sleep(0.5)
    progress(f"{name}: LS still behind after {config.settle_timeout_s:.0f} s more; going on")


def _took(trigger: float, end: float | None) -> str:
    return "did not finish" if end is None else f"took {end - trigger:.2f} s"


def read_back(
    settings: KafkaSettings, topic: str, partitions: int, timeout: float = 600.0
) -> list[tuple[str, float]]:
    """Every BIG record ``(key, ts)`` in ``topic`` but the closers, read from the start to the end."""
    ends = end_offsets(settings, [(topic, p) for p in range(partitions)])
    consumer, _ = make_consumer(settings, f"s5-readback-{uuid.uuid4().hex[:8]}")
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    positions = {p: 0 for p in range(partitions)}
    records: list[tuple[str, float]] = []
    deadline = time.monotonic() + timeout
    try:
        while any(positions[p] < ends[(topic, p)] for p in range(partitions)):
            if time.monotonic() > deadline:
                raise RuntimeError(f"reading {topic} back did not finish within {timeout:.0f} s")
            for message in consumer.consume(10_000, 0.5):
                if message.error() is not None:
                    continue
                partition, offset = message.partition(), message.offset()
                if partition is None or offset is None:
                    continue
                positions[partition] = offset + 1
                value = json.loads(message.value() or b"null")
                if value["key"] != CLOSER_KEY:
                    records.append((str(value["key"]), float(value["ts"])))
    finally:
        consumer.close()
    return records


def compare_input(sent: Mapping[WindowKey, int], in_topic: Mapping[WindowKey, int]) -> dict[str, int]:
    """Records the harness sent that the input topic lacks, and records it holds twice."""
    windows = set(sent) | set(in_topic)
    return {
        "records_sent": sum(sent.values()),
        "records_in_topic": sum(in_topic.values()),
        "lost_records": sum(max(0, sent.get(w, 0) - in_topic.get(w, 0)) for w in windows),
        "extra_records": sum(max(0, in_topic.get(w, 0) - sent.get(w, 0)) for w in windows),
    }


def close_windows(settings: KafkaSettings, topic: str, partitions: int) -> None:
    """One record per partition a day past BIG's window: every partition's watermark closes it."""
    producer, _ = make_producer(settings, **{"enable.idempotence": False})
    for p in range(partitions):
        value = json.dumps({"key": CLOSER_KEY, "ts": T0 + 2 * BIG_WINDOW_S}).encode()
        producer.produce(topic, value, CLOSER_KEY.encode(), partition=p)
    if producer.flush(30):
        raise RuntimeError("the closing records were not delivered")


# -- the whole benchmark -------------------------------------------------------------------------------------


def run_benchmark(
    out: Path, *, config: MigrationConfig, bootstrap: str | None = None, progress: Progress = print
) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    strategies, skipped = choose_strategies(config.strategies)
    for name, why in skipped.items():
        progress(f"{name}: skipped ({why})")
    entries: dict[str, dict[str, Any]] = {}
    failed: dict[str, str] = {}
    for strategy in strategies:
        try:
            # A fresh embedded broker per strategy: its memory storage keeps every earlier run's
            # records, and its CPU cost grew with them, which would load the later strategies more.
            with broker_settings(bootstrap) as settings:
                entries[strategy.name] = run_strategy(strategy, settings, config, out, progress)
        except Exception as exc:  # one strategy failing must not lose the others' results
            progress(f"{strategy.name}: failed: {exc}")
            failed[strategy.name] = str(exc)
    result: dict[str, Any] = {
        "benchmark": "s5_migration",
        "strategies": entries,
        "skipped": skipped,
        "failed": failed,
        "config": asdict(config),
        "load_average": list(os.getloadavg()),
        **machine_and_commit(),
    }
    check_shape(result)
    write_result(out, "migration.json", result)
    if entries:
        plot(entries, config, out / "migration.png")
    return result


def plot(entries: Mapping[str, Mapping[str, Any]], config: MigrationConfig, path: Path) -> None:
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig, axes = plt.subplots(len(entries), 1, figsize=(12, 3.6 * len(entries)), squeeze=False)
    for ax, (name, entry) in zip(axes[:, 0], entries.items(), strict=True):
        began = entry["series"]["run_start"]
        points = entry["series"]["ls"]
        if points:
            ax.scatter(
                [p[0] for p in points], [max(p[1], 0.1) for p in points], s=4, label="LS window result"
            )
        for phase, colour in (("scale_out", "tab:orange"), ("scale_in", "tab:green")):
            info = entry["phases"].get(phase)
            if info is None:
                continue
            end = info["end"] if info["end"] is not None else info["start"] + config.migration_timeout_s
            ax.axvspan(
                info["start"] - began, end - began, color=colour, alpha=0.25, label=phase.replace("_", "-")
            )
        ax.axhline(config.ls_target * 1000, color="grey", linestyle="--", label="LS target")
        ax.set_yscale("log")
        ax.set_ylabel("LS latency (ms, log)")
        ax.set_title(f"{name}: LS latency per window, migrations shaded ({config.keys:,} keys in BIG)")
        ax.legend(fontsize=8, loc="upper left")
    axes[-1, 0].set_xlabel("window end (s after the first worker started)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"wrote {path}")


def format_table(result: Mapping[str, Any]) -> str:
    lines = [
        f"{'strategy':12s} {'LS max ms':>10s} {'LS p99 ms':>10s} {'LS met':>7s} {'migr. s':>8s} "
        f"{'restored keys':>14s} {'correct':>8s}"
    ]
    for name, entry in result["strategies"].items():
        lines.append(
            f"{name:12s} {_fmt(entry['ls_max_ms']):>10s} {_fmt(entry['ls_p99_ms']):>10s} "
            f"{_ratio(entry['ls_deadline_met_ratio']):>7s} {_fmt(entry['duration_s'], '.2f'):>8s} "
            f"{entry.get('restored_keys', 0):>14,} {entry['results_correct']!s:>8s}"
        )
    for name, why in result.get("skipped", {}).items():
        lines.append(f"{name:12s} skipped: {why}")
    for name, why in result.get("failed", {}).items():
        lines.append(f"{name:12s} failed: {why}")
    return "\n".join(lines)


def _fmt(value: float | None, spec: str = ",.0f") -> str:
    return "-" if value is None else format(value, spec)


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--strategies", default=",".join(DEFAULT_STRATEGIES))
    parser.add_argument("--bootstrap", default=None)
    parser.add_argument("--keys", type=int, default=None, help="BIG's keys (the mode's default otherwise)")
    parser.add_argument("--ls-linger-ms", type=int, default=None, help="linger.ms of LS's input producer")
    parser.add_argument("--big-linger-ms", type=int, default=None, help="linger.ms of BIG's input producer")
    parser.add_argument("--worker-linger-ms", type=int, default=None, help="the workers' CADENZA_LINGER_MS")
    args = parser.parse_args(argv)
    names = tuple(s.strip() for s in args.strategies.split(",") if s.strip())
    overrides: dict[str, Any] = {"strategies": names}
    for name in ("keys", "ls_linger_ms", "big_linger_ms", "worker_linger_ms"):
        if getattr(args, name) is not None:
            overrides[name] = getattr(args, name)
    config = quick_config(**overrides) if args.quick else MigrationConfig(**overrides)
    result = run_benchmark(args.out, config=config, bootstrap=args.bootstrap)
    print(format_table(result))


if __name__ == "__main__":
    main()
