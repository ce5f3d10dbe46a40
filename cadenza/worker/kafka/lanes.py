"""Fetch lanes: which consumer of the worker reads which topic.

librdkafka hands a consumer's records out of one queue in the order they were fetched. A worker
reading a latency-sensitive topic and a bulk one through one consumer therefore delivers an urgent
record only after every bulk record prefetched before it, however high the scheduler would rank it:
a deadline-aware scheduler behind a first-come-first-served queue is first-come-first-served at the
tail. So topics are split into *lanes*, each read by a consumer of its own (its own queue and
prefetch limits), and every lane's records enter the one scheduler, which picks across lanes by
priority.

A topic's lane follows from the tightest latency target among the pipelines reading it (repartition
topics included: the sub-topology after a ``key_by`` reads one). The topics one join reads share a
lane, the most urgent of theirs (:func:`joint_targets`): partition ``p`` of both must be assigned to
one worker, and the group's assignor co-partitions topics only among the members subscribed to both,
that is within one consumer's subscription (with a join's inputs on two consumers, two workers were
found holding one side each). The ``lanes`` setting chooses how:

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
keeps the bulk settings the worker always had.

**Produce lanes.** The same lanes write: every topic a pipeline writes (sinks, repartition topics,
changelogs, its late and dead-letter topics) goes through the producer of the lane its pipeline's
target falls in (:func:`plan_produce_lanes`; a topic written by several pipelines, through the most
urgent of theirs, so one producer keeps each topic's order). librdkafka lingers per partition: a
batch leaves when its first record is ``linger.ms`` old, and it sends one produce request per
partition's batch. A worker that interleaves an urgent tenant's short quanta with a bulk tenant's
hands the bulk partitions their records spread over time, so with one producer lingering a few
milliseconds for the urgent records, the bulk records leave in many small requests, and the broker
pays per request (a cameo worker in S1 sent 23-69% more produce requests than fifo for the same
records; the same records handed to one producer round-robin over 20 partitions cost 5.5-8 times
the requests and 3-4 times the broker CPU of runs per partition:
``benchmarks/results/2026-11-29/NOTES.md``, "What the worker asks of the broker per policy"). A lane
behind the most urgent one therefore has a producer of its own, lingering
:data:`PRODUCE_LINGER_SHARE` of its tightest writer's target (at most :data:`PRODUCE_LINGER_CAP`,
never less than the worker's ``linger``); the most urgent lane keeps the worker's ``linger``.

The most urgent lane's broker wait is the worker's ``fetch_wait`` (20 ms by default): short, because
the embedded broker holds a parked fetch for the whole wait even when data arrives meanwhile, so the
wait is latency on a quiet partition. Every lane behind it is *patient* (:func:`patient_fetch`): it
waits up to :data:`BULK_WAIT_SHARE` of its own target (at most :data:`BULK_WAIT_CAP`, never less
than ``fetch_wait``) and asks for :data:`BULK_MIN_BYTES` before the broker answers. A fetch that
ends empty is not free: the embedded broker's cost per fetch request grows with the record batches
the fetched partitions hold (a consumer following a trickle into four partitions of 5,000 batches
each kept it at about one core with a 20 ms wait, 0.3 with 250 ms), and that CPU is taken from the
urgent lane's fetches and produces (``benchmarks/results/2026-11-29/NOTES.md``, "Fetch lanes on S1
again"). A lane whose target is seconds loses little by waiting a few hundred ms, and during a burst
the minimum is met at once (in S1 BA's capacity with patient lanes was 2% below one consumer's, at
20 ms lanes 16%).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from cadenza.errors import ConfigError
from cadenza.worker.config import lane_bounds

__all__ = [
    "BULK_MIN_BYTES",
    "BULK_WAIT_CAP",
    "BULK_WAIT_SHARE",
    "LANE_RATIO",
    "PRODUCE_LINGER_CAP",
    "PRODUCE_LINGER_SHARE",
    "Lane",
    "ProduceLane",
    "joint_targets",
    "lane_bounds",
    "patient_fetch",
    "plan_lanes",
    "plan_produce_lanes",
    "topic_targets",
]

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
#: A lane behind the most urgent one waits at the broker up to this share of its latency target...
BULK_WAIT_SHARE = 0.05
#: ...but never longer than this many seconds (a bulk lane must still see a quiet topic's records).
BULK_WAIT_CAP = 0.5
#: ...unless this many bytes are ready (a burst fills a fetch at once, so throughput is kept).
BULK_MIN_BYTES = 256 * 1024

#: A produce lane behind the most urgent one lingers this share of its tightest writer's target...
PRODUCE_LINGER_SHARE = 0.02
#: ...but at most this many seconds (batches of a tenth of a second are already few requests).
PRODUCE_LINGER_CAP = 0.1


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


@dataclass(frozen=True, slots=True)
class ProduceLane:
    """One producer's topics and linger; the first lane's producer also writes every topic not
    listed in any lane (a worker's own records: rates, spans)."""

    index: int
    topics: tuple[str, ...]
    linger_ms: int

    @property
    def name(self) -> str:
        return "producer" if self.index == 0 else f"producer-lane{self.index}"


def plan_produce_lanes(
    writers: Iterable[tuple[str, float]], lanes: Sequence[Lane], linger_ms: int
) -> list[ProduceLane]:
    """The producers for ``(topic, latency target of a pipeline writing it)`` pairs, given the fetch
    ``lanes`` (most urgent first) and the worker's ``linger_ms``.

    A pipeline's lane is the last fetch lane whose target is at most the pipeline's (the first if
    none is), a topic's the most urgent of its writers'. Lane 0 lingers ``linger_ms``; a later lane
    ``max(linger_ms, min(PRODUCE_LINGER_CAP, PRODUCE_LINGER_SHARE * t))`` in whole ms, ``t`` the
    tightest target among the pipelines writing through it. Lanes left without a topic are dropped,
    except lane 0; indices are kept, so a producer is named after the fetch lane it writes for."""
    pairs = list(writers)
    bounds = [lane.target for lane in lanes]
    lane_of: dict[str, int] = {}
    tightest: dict[int, float] = {}
    for topic, target in pairs:
        index = max((i for i, bound in enumerate(bounds) if bound <= target), default=0)
        lane_of[topic] = min(index, lane_of.get(topic, index))
    for topic, target in pairs:
        index = lane_of[topic]
        tightest[index] = min(target, tightest.get(index, target))
    grouped: dict[int, list[str]] = {0: []}
    for topic, index in lane_of.items():
        grouped.setdefault(index, []).append(topic)

    def linger(index: int) -> int:
        if index == 0:
            return linger_ms
        return max(linger_ms, round(min(PRODUCE_LINGER_CAP, PRODUCE_LINGER_SHARE * tightest[index]) * 1000))

    return [ProduceLane(index, tuple(sorted(grouped[index])), linger(index)) for index in sorted(grouped)]


def topic_targets(readers: Iterable[tuple[str, float]]) -> dict[str, float]:
    """``(topic, latency target of a pipeline reading it)`` pairs -> each topic's tightest target."""
    targets: dict[str, float] = {}
    for topic, target in readers:
        targets[topic] = min(target, targets.get(topic, target))
    return targets


def joint_targets(targets: Mapping[str, float], together: Iterable[Iterable[str]]) -> dict[str, float]:
    """``targets`` with every topic of a ``together`` group (the input topics of one join) lowered to
    the tightest target in its group, so that the group lands in one lane; groups that share a topic
    merge. Topics in a group but not in ``targets`` are ignored."""
    parent = {topic: topic for topic in targets}

    def root(topic: str) -> str:
        while parent[topic] != topic:
            parent[topic] = parent[parent[topic]]
            topic = parent[topic]
        return topic

    for group in together:
        members = [topic for topic in group if topic in parent]
        for topic in members[1:]:
            parent[root(topic)] = root(members[0])
    tightest: dict[str, float] = {}
    for topic, target in targets.items():
        top = root(topic)
        tightest[top] = min(target, tightest.get(top, target))
    return {topic: tightest[root(topic)] for topic in targets}


def patient_fetch(target: float, fetch_wait: float) -> dict[str, Any]:
    """The broker wait and minimum of a lane behind the most urgent one, whose tightest target is
    ``target`` seconds: ``min(max(fetch_wait, BULK_WAIT_CAP), max(fetch_wait, target * BULK_WAIT_SHARE))``
    and :data:`BULK_MIN_BYTES` (see the module doc for why)."""
    wait = min(max(fetch_wait, BULK_WAIT_CAP), max(fetch_wait, target * BULK_WAIT_SHARE))
    return {"fetch.wait.max.ms": _ms(wait), "fetch.min.bytes": BULK_MIN_BYTES}


def plan_lanes(targets: Mapping[str, float], spec: str = "auto", fetch_wait: float = 0.02) -> list[Lane]:
    """The lanes for topics with these tightest targets, most urgent first: the first fetches with a
    broker wait of ``fetch_wait`` seconds, the others patiently (:func:`patient_fetch`)."""
    wait = {"fetch.wait.max.ms": _ms(fetch_wait)}
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
    lanes = []
    for i, topics in enumerate(filled):
        target = min(targets[t] for t in topics)
        prefetch = BULK_FETCH if i == last else URGENT_FETCH
        broker_wait = wait if i == 0 else patient_fetch(target, fetch_wait)
        lanes.append(Lane(i, tuple(topics), target, {**prefetch, **broker_wait}))
    return lanes


def _ms(seconds: float) -> int:
    """librdkafka's whole milliseconds, at least 1."""
    return max(1, round(seconds * 1000))


def _auto_bounds(targets: Iterable[float]) -> tuple[float, ...]:
    """A bound between every two consecutive distinct targets at least :data:`LANE_RATIO` apart."""
    ordered: Sequence[float] = sorted(set(targets))
    return tuple(high for low, high in pairwise(ordered) if high >= LANE_RATIO * low)
