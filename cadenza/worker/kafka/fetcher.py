"""The fetcher: takes records from the consumer while keeping the worker's buffer bounded.

Flow control (:class:`FlowControl`, pure: it decides, the :class:`Fetcher` applies): each assigned
partition may hold a fair share of half of ``max_buffered``; a partition at its share is paused and
resumed once it drained to half of it, so a bursting topic is held back at the broker (neither the
scheduler's buffer nor librdkafka's prefetch grows) while a quiet one keeps flowing, and its urgent
records still reach the scheduler. If the buffer is full all the same (many sub-topologies reading
one topic), every partition is paused until it drained to half.

Shares protect work from other work, so they apply only when the worker's topics are read with
different latency targets (:attr:`FlowControl.shares`, set by the worker). When every topic serves
the same target there is no more urgent partition to keep room for, and a pause only costs:
librdkafka drops what it had prefetched for a paused partition and fetches it again after the
resume (librdkafka issue 5343). In S3 one pipeline on a backlog ran at 63,000-99,000 records/s with
pauses at its share, 82,000-96,000 without (``benchmarks/results/2026-11-26/NOTES.md``, "The slow
S3 repetitions"). Then only the pause-everything brake (and producer backpressure, below) pauses.

Backpressure from the producer is a signal the fetcher obeys, in the manner of a stream step that
rejects a message until it has room: while the producer's local queue is above its high mark
(:attr:`~cadenza.worker.engine.output.Output.pressure`), every partition is paused and nothing is fetched,
and the run loop stops starting quanta, until acknowledgements bring the queue back below it. The
records that would have overfilled the queue stay at the broker, where they cost nothing.

A partition of a topic that a stopped pipeline reads (``held``) stays paused for good: its records
could never be committed past the one that stopped the pipeline.

With fetch lanes (:mod:`cadenza.worker.kafka.lanes`) the fetcher holds one consumer per lane and takes
from every lane at each fetch, most urgent first; flow control is one decision over the union of the
lanes' assignments (the bound is on the whole buffer), applied to each partition through the
consumer that owns it, so a flooded lane's partitions are paused and the others keep flowing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field

from confluent_kafka import Consumer, Message, TopicPartition

from cadenza.worker.engine.counters import WorkerCounters

__all__ = ["Fetcher", "FlowControl", "FlowDecision"]

PartitionKey = tuple[str, int]
#: ``(topic, partition) -> records of that partition queued in the scheduler``.
Queued = Callable[[str, int], int]
#: Seconds one lane is waited on at a time while every lane is empty (the extra latency a record on
#: another lane can see then).
_WAIT_SLICE = 0.002


@dataclass(slots=True)
class FlowDecision:
    """What to pause and resume now; ``paused_more`` counts as one pause in the worker's counters."""

    pause: list[TopicPartition] = field(default_factory=list)
    resume: list[TopicPartition] = field(default_factory=list)
    paused_more: bool = False


class FlowControl:
    """Pause and resume decisions over the partitions' buffered records, and how much to fetch.

    ``fanout`` is the most sub-topologies reading one topic: a record fetched becomes that many
    units, so room for units is divided by it.
    """

    __slots__ = ("fanout", "full", "lanes", "max_buffered", "paused", "share", "shares")

    def __init__(self, max_buffered: int, fanout: int = 1, lanes: int = 1, *, shares: bool = True) -> None:
        self.max_buffered = max_buffered
        #: Whether a partition is paused at its share (see the module docstring); without shares only
        #: the pause-everything brake (and a held topic) pauses.
        self.shares = shares
        self.fanout = max(1, fanout)
        #: Consumers fetched from: each may return one record even when there is no room (a fetch
        #: must call every consumer to serve its callbacks), so the brake leaves room for that many.
        self.lanes = max(1, lanes)
        #: Partitions paused, by (topic, partition).
        self.paused: dict[PartitionKey, TopicPartition] = {}
        #: Every partition is paused: the buffer filled up or the producer pushed back.
        self.full = False
        #: Records one partition may hold before it is paused (updated with the assignment).
        self.share = max_buffered

    def room(self, buffered: int) -> int:
        """Records to ask the consumer for: at most one partition's share, since a poll takes records
        in librdkafka's fetch order, and a larger one would let one bursting partition overshoot its
        share by a whole batch. At most 0 when the buffer has no room. With several lanes, a record
        for each lane after the first is kept back: a lane finding no room left still takes one."""
        return min((self.max_buffered - buffered) // self.fanout - (self.lanes - 1), self.share)

    def decide(
        self,
        assignment: Sequence[TopicPartition],
        buffered: int,
        queued: Queued,
        held: Collection[str] = (),
        pressure: bool = False,
    ) -> FlowDecision:
        """Update :attr:`paused` for the current buffer and return what changed.

        ``queued(topic, partition)`` is at most ``buffered``: a partition's records are part of the
        buffer.
        """
        decision = FlowDecision()
        paused = self.paused
        if pressure or buffered >= self.max_buffered - self.fanout * self.lanes:
            if not self.full:
                self.full = True
                decision.paused_more = True
            decision.pause = [tp for tp in assignment if (tp.topic, tp.partition) not in paused]
            paused.update(((tp.topic, tp.partition), tp) for tp in decision.pause)
            return decision
        if self.full:
            if buffered > self.max_buffered // 2:
                return decision
            self.full = False
        # Half the buffer split evenly: partitions at their share are paused long before the whole
        # buffer is full, so the pause-everything brake above (which also stops the quiet tenants'
        # partitions) is not what a single burst runs into.
        share = self.share = max(1, self.max_buffered // (2 * max(1, len(assignment))))
        shares = self.shares
        if not paused and not held and (not shares or buffered < share):
            # No partition can be at its share (it holds at most ``buffered``) and none is paused:
            # nothing changes. Most rounds end here, without asking every partition's count.
            return decision
        for tp in assignment:
            key = (tp.topic, tp.partition)
            if key in paused:
                if tp.topic not in held and (not shares or queued(tp.topic, tp.partition) <= share // 2):
                    decision.resume.append(paused.pop(key))
            elif tp.topic in held or (shares and queued(tp.topic, tp.partition) >= share):
                decision.pause.append(tp)
                paused[key] = tp
        decision.paused_more = bool(decision.pause)
        return decision

    def forget(self, keys: Collection[PartitionKey]) -> None:
        """Partitions that went: a later assignment of them starts unpaused (the rebalance handler
        resumes them in the client before they go, see :mod:`cadenza.worker.kafka.rebalance`)."""
        for key in keys:
            self.paused.pop(key, None)


class Fetcher:
    """Fetches from the lanes' consumers and applies :class:`FlowControl` to them.

    ``consumers`` are the lanes' consumers, most urgent first, each with the topics it reads (a
    single consumer: the worker without lanes).
    """

    __slots__ = (
        "_assigned",
        "_assigned_at",
        "_changes",
        "_counters",
        "_owner",
        "batch_size",
        "consumers",
        "flow",
        "poll_timeout",
        "waited",
    )

    def __init__(
        self,
        consumers: Sequence[tuple[Consumer, Collection[str]]],
        flow: FlowControl,
        counters: WorkerCounters,
        *,
        batch_size: int,
        poll_timeout: float,
        assignment_changes: Callable[[], int],
    ) -> None:
        if not consumers:
            raise ValueError("the fetcher needs at least one consumer")
        self.consumers = [consumer for consumer, _ in consumers]
        #: topic -> the consumer subscribed to it.
        self._owner = {topic: consumer for consumer, topics in consumers for topic in topics}
        self.flow = flow
        self._counters = counters
        self.batch_size = batch_size
        self.poll_timeout = poll_timeout
        #: The last :meth:`fetch` waited for records (nothing was queued): time no record waited on
        #: the worker, so not a stall (:mod:`cadenza.worker.reliability.loop_watch`).
        self.waited = False
        #: A count that moves whenever the assignment may have (the rebalance handler's): the clients
        #: are asked only then. Asking costs tens of microseconds or more (a round trip to the
        #: client's main thread and a TopicPartition per partition), and the flow control needs the
        #: assignment every round.
        self._changes = assignment_changes
        self._assigned: list[TopicPartition] = []
        self._assigned_at: int | None = None

    @property
    def consumer(self) -> Consumer:
        """The most urgent lane's consumer (the only one without lanes)."""
        return self.consumers[0]

    def owner(self, topic: str) -> Consumer:
        """The consumer that reads ``topic``: the one its partitions are paused and committed through."""
        return self._owner.get(topic, self.consumers[-1])

    def end_offset(self, topic: str, partition: int) -> int | None:
        """The partition's high watermark as of the consumer's last fetch response (cached: no broker
        round trip), or ``None`` before one."""
        marks = self.owner(topic).get_watermark_offsets(TopicPartition(topic, partition), cached=True)
        return marks[1] if marks is not None and marks[1] >= 0 else None

    def fetch(self, buffered: int, pressure: bool, *, block: bool = True) -> list[Message]:
        """As many records as there is room for; waits up to ``poll_timeout`` only on an empty buffer
        (and not at all without ``block``: the worker has other work, such as a restore).

        Every lane is asked, most urgent first, for what the client already holds (``consume(n, t)``
        waits all of ``t`` unless ``n`` records come, so a batch is never waited for), each within the
        room the lanes before it left. Under producer backpressure every partition is paused (see
        :meth:`regulate`), so the calls only serve the consumers' callbacks, waiting a little in all
        for acknowledgements to make room.
        """
        consumers = self.consumers
        room = self.flow.room(buffered)
        wait = min(self.poll_timeout, 0.01) / len(consumers) if pressure else 0.0
        messages: list[Message] = []
        for consumer in consumers:
            left = room - len(messages)
            messages.extend(consumer.consume(min(self.batch_size, left) if left > 0 else 1, wait))
        if messages or buffered or pressure or not block:
            self.waited = False
            return messages
        self.waited = True
        # Nothing anywhere: wait for the first record of any lane; with several lanes, in slices short
        # enough that a record on one lane waits little while another is waited on.
        wait = self.poll_timeout if len(consumers) == 1 else _WAIT_SLICE
        until = time.monotonic() + self.poll_timeout
        while True:
            for consumer in consumers:
                messages = consumer.consume(1, wait)
                if messages:
                    return self._with_the_rest(messages, room)
            if time.monotonic() >= until:
                return []

    def _with_the_rest(self, messages: list[Message], room: int) -> list[Message]:
        """The record that ended a wait, and what the lanes already hold beside it, without waiting.

        A record ends the wait as soon as its fetch response arrives, and the rest of that response
        is in the client by then: taken now, it runs in this round instead of costing a round of its
        own. In S1 with the bulk tenant almost idle, this took the worker from about 150 rounds a
        second to about 100 for the same records.
        """
        for consumer in self.consumers:  # most urgent first, as the first pass
            left = room - len(messages)
            if left <= 0:
                break
            messages.extend(consumer.consume(min(self.batch_size, left), 0.0))
        return messages

    def assignment(self) -> list[TopicPartition]:
        """Every lane's assigned partitions (asked of the clients only after a change)."""
        now = self._changes()
        if now != self._assigned_at:
            self._assigned = [tp for consumer in self.consumers for tp in consumer.assignment()]
            self._assigned_at = now
        return self._assigned

    def regulate(
        self,
        buffered: int,
        queued: Queued,
        held: Collection[str],
        pressure: bool,
        *,
        waiting: Collection[PartitionKey] = (),
    ) -> None:
        """Pause and resume partitions for the buffer as it is now, each through its own consumer.

        ``waiting`` partitions are paused for another reason (their state is being restored) and
        left alone: the worker resumes them when it is back."""
        assignment = self.assignment()
        if waiting:
            assignment = [tp for tp in assignment if (tp.topic, tp.partition) not in waiting]
        decision = self.flow.decide(assignment, buffered, queued, held, pressure)
        if decision.pause:
            for consumer, partitions in self._by_owner(decision.pause):
                consumer.pause(partitions)
        if decision.paused_more:
            self._counters.pauses += 1
        if decision.resume:
            for consumer, partitions in self._by_owner(decision.resume):
                consumer.resume(partitions)

    def _by_owner(self, partitions: list[TopicPartition]) -> list[tuple[Consumer, list[TopicPartition]]]:
        if len(self.consumers) == 1:
            return [(self.consumers[0], partitions)]
        grouped: dict[int, tuple[Consumer, list[TopicPartition]]] = {}
        for tp in partitions:
            consumer = self.owner(tp.topic)
            grouped.setdefault(id(consumer), (consumer, []))[1].append(tp)
        return list(grouped.values())
