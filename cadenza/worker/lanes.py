"""Fetch lanes: which consumer of the worker reads which topic.

librdkafka hands a consumer's records out of one queue in the order they were fetched. A worker
reading a latency-sensitive topic and a bulk one through one consumer therefore delivers an urgent
record only after every bulk record prefetched before it, however high the scheduler would rank it:
a deadline-aware scheduler behind a first-come-first-served queue is first-come-first-served at the
tail. So topics are split into *lanes*, each read by a consumer of its own (its own queue and
prefetch limits), and every lane's records enter the one scheduler, which picks across lanes by
priority.

A topic's lane follows from the tightest latency target among the pipelines reading it (repartition
topics included: the sub-topology after a ``key_by`` reads one). The ``lanes`` setting chooses how:

- ``auto`` (the default): targets are sorted and a new lane starts wherever a target is at least
  :data:`LANE_RATIO` times the one before, so pipelines of similar targets share a lane and a worker
  whose targets are all alike keeps a single consumer, exactly as without lanes;
- ``off``: one lane, one consumer;
- bounds in milliseconds, ascending, comma-separated (``500,10000``): a topic whose tightest target
  is below the first bound goes to the first lane, below the second to the second, and so on; the
  rest to the last. Lanes left without a topic are dropped.

Every lane's consumer joins the worker's one group with its own disjoint subscription, so committed
offsets stay in that group whatever the lanes are (a topic that changes lane keeps its progress).
The most urgent lanes fetch with a small prefetch (records reach the scheduler fresh); the last lane
keeps the bulk settings the worker always had. Every lane's broker wait is the worker's
``fetch_wait`` (20 ms by default): short, because the embedded broker holds a parked fetch for the
whole wait even when data arrives meanwhile, so the wait is latency on a quiet partition; but each
wait that ends empty is another fetch request, and the embedded broker's cost per request grows with
the records it holds (``benchmarks/bench_broker_growth.py``), so a long run there wants a longer one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from cadenza.errors import ConfigError

__all__ = ["LANE_RATIO", "Lane", "lane_bounds", "plan_lanes", "topic_targets"]

#: Targets this many times apart (or more) go to different lanes under ``lanes=auto``.
LANE_RATIO = 4.0

#: The consumer settings of the bulk lane (and of a worker with one lane): the prefetch is the other
#: buffer a burst fills, so it is bounded; a fetch waits at most 20 ms (the embedded broker holds a
#: parked fetch for the whole wait, which adds up to that much latency on an idle partition).
BULK_FETCH: dict[str, Any] = {"queued.max.messages.kbytes": 32768, "fetch.wait.max.ms": 20}
#: The settings of a more urgent lane: a short broker wait and a prefetch small enough that what it
#: holds is always fresh (its records are few: the flood is in the bulk lane).
URGENT_FETCH: dict[str, Any] = {
    "queued.max.messages.kbytes": 2048,
    "fetch.wait.max.ms": 20,
    "fetch.max.bytes": 4 * 1024 * 1024,
}


@dataclass(frozen=True, slots=True)
class Lane:
    """One consumer's topics; ``target`` is the tightest latency target (seconds) among them."""

    index: int
    topics: tuple[str, ...]
    target: float
    #: librdkafka settings of this lane's consumer (before the user's consumer overrides).
    fetch: Mapping[str, Any]

    @property
    def name(self) -> str:
        return f"lane{self.index}"


def topic_targets(readers: Iterable[tuple[str, float]]) -> dict[str, float]:
    """``(topic, latency target of a pipeline reading it)`` pairs -> each topic's tightest target."""
    targets: dict[str, float] = {}
    for topic, target in readers:
        targets[topic] = min(target, targets.get(topic, target))
    return targets


def lane_bounds(spec: str) -> tuple[float, ...] | None:
    """The ``lanes`` setting checked: ``None`` for ``auto``, ``()`` for ``off``, else the bounds in
    seconds. Raises :class:`ValueError` naming what is wrong."""
    text = spec.strip().lower()
    if text == "auto":
        return None
    if text in ("off", "1", ""):
        return ()
    try:
        bounds = tuple(float(part) / 1000.0 for part in text.split(","))
    except ValueError:
        raise ValueError(
            f"lanes must be auto, off, or ascending latency bounds in ms such as 1000 or 500,10000; "
            f"got {spec!r}"
        ) from None
    if any(b <= 0 for b in bounds) or any(a >= b for a, b in pairwise(bounds)):
        raise ValueError(f"lanes bounds must be positive and ascending (in ms), got {spec!r}")
    return bounds


def plan_lanes(targets: Mapping[str, float], spec: str = "auto", fetch_wait: float = 0.02) -> list[Lane]:
    """The lanes for topics with these tightest targets, most urgent first, each fetching with a
    broker wait of ``fetch_wait`` seconds (see the module doc)."""
    wait = {"fetch.wait.max.ms": max(1, round(fetch_wait * 1000))}
    try:
        bounds = lane_bounds(spec)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if bounds is None:
        bounds = _auto_bounds(targets.values())
    groups: list[list[str]] = [[] for _ in range(len(bounds) + 1)]
    for topic, target in targets.items():
        index = next((i for i, bound in enumerate(bounds) if target < bound), len(bounds))
        groups[index].append(topic)
    filled = [sorted(topics) for topics in groups if topics]
    if not filled:
        return [Lane(0, (), float("inf"), {**BULK_FETCH, **wait})]
    last = len(filled) - 1
    return [
        Lane(
            i,
            tuple(topics),
            min(targets[t] for t in topics),
            {**(BULK_FETCH if i == last else URGENT_FETCH), **wait},
        )
        for i, topics in enumerate(filled)
    ]


def _auto_bounds(targets: Iterable[float]) -> tuple[float, ...]:
    """A bound between every two consecutive distinct targets at least :data:`LANE_RATIO` apart."""
    ordered: Sequence[float] = sorted(set(targets))
    return tuple(high for low, high in pairwise(ordered) if high >= LANE_RATIO * low)
