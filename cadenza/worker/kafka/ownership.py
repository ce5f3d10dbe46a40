"""A worker in *plan* ownership: it runs the input partitions the ownership plan gives it.

The plan (:mod:`cadenza.scaling.ownership`) replaces the group protocol's rebalances: the worker
``assign()``s what the plan says is its own, and takes part in moves. As the new owner it keeps a warm
copy of the partition's state, read from the changelogs by a tailing reader (a slice at a time between
runs of records, like the background restore), and says ``ready`` once the copy reached the
changelogs' end; as the old owner it commits, fences and releases; as the new owner again it reads the
copy up to the fences, installs it and takes the partition. What the worker does to its partitions
goes through :class:`Hands`, the same paths (and log lines) as a rebalance's assign and revoke.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping
from typing import Protocol

from confluent_kafka import Consumer

from cadenza.infra.kafka.clients import make_consumer
from cadenza.scaling.ownership import Claim, OwnershipLog, Partition, duty
from cadenza.settings import KafkaSettings
from cadenza.state import ChangelogReader, ChangelogReplay

__all__ = ["Hands", "PlanFollower", "warm_read_budget"]

_log = logging.getLogger("cadenza.worker")

#: A changelog ``(topic, partition)``.
Changelog = tuple[str, int]
#: What the warm copies' client may hold fetched and not yet read (librdkafka's default: 64 MiB).
WARM_PREFETCH_KB = 2048


def warm_read_budget(earliest_deadline: float | None, now: float, read_slice: float) -> float:
    """Seconds the worker may spend reading warm copies before it runs its queued records.

    The copies are paced by the deadlines of what waits: nothing queued, a whole ``read_slice``;
    records queued, half the slack of the most urgent one (its start deadline minus ``now``), at
    most a slice, so that the record still starts in time with room to spare; no slack left,
    nothing. A warm copy has no deadline of its own until its hand-over, when the partition's records
    wait for it (:meth:`PlanFollower.step` reads then whatever the budget).
    """
    if earliest_deadline is None:
        return read_slice
    slack = earliest_deadline - now
    return min(read_slice, slack / 2.0) if slack > 0.0 else 0.0


class Hands(Protocol):
    """What the follower asks of the worker."""

    def holds(self, partition: Partition) -> bool:
        """Whether the worker runs the partition now."""
        ...

    def changelogs(self, partition: Partition) -> list[Changelog]:
        """The changelog partitions holding the partition's state (none for a stateless one)."""
        ...

    def take(self, partition: Partition, warm: Mapping[Changelog, ChangelogReplay] | None) -> None:
        """Run the partition from its committed offset, over ``warm`` state (changelog -> its copy, read
        up to the fences; empty for a stateless partition) if given, else restoring its state."""
        ...

    def release(self, partition: Partition, epoch: int) -> None:
        """Commit what finished, write the fences at ``epoch``, stop running the partition."""
        ...

    def drop(self, partition: Partition) -> None:
        """Stop running the partition at once, committing nothing more for it (it is someone else's)."""
        ...


class PlanFollower:
    """Reads the plan and carries out this worker's part of it; :meth:`step` once per worker step."""

    def __init__(
        self,
        log: OwnershipLog,
        me: str,
        hands: Hands,
        settings: KafkaSettings,
        *,
        read_slice: float = 0.01,
        poll_interval: float = 0.02,
    ) -> None:
        self._log = log
        self._me = me
        self._hands = hands
        self._settings = settings
        self._slice = read_slice
        self._poll_interval = poll_interval
        self._next_poll = 0.0
        self._reader: ChangelogReader | None = None
        self._consumer: Consumer | None = None
        #: Input partition -> the changelog partitions of its warm copy.
        self._warm: dict[Partition, list[Changelog]] = {}
        #: Changelog partitions read to their end at least once.
        self._reached: set[Changelog] = set()
        #: ``(partition, epoch)`` moves for which this worker said ``ready``.
        self._said_ready: set[tuple[Partition, int]] = set()

    @property
    def warming(self) -> bool:
        """Whether a warm copy is being read (the worker then must not block in its fetch)."""
        return bool(self._warm)

    def start(self) -> None:
        """Read the plan to its end and take what it gives this worker (a start or a restart)."""
        self._act(self._log.read_to_end())

    @property
    def copied(self) -> int:
        """Changelog messages read into warm copies so far (grows; the worker freezes what it built,
        :meth:`cadenza.worker.tuning.gc_tuning.GcTuning.settle`)."""
        return 0 if self._reader is None else self._reader.messages

    @property
    def read_slice(self) -> float:
        """The most seconds one step reads warm copies for."""
        return self._slice

    def step(self, *, budget: float) -> None:
        """Follow the plan; read warm copies for up to ``budget`` seconds (:func:`warm_read_budget`),
        or a whole slice while a move this worker finishes waits for its fences: the old owner has
        released the partition, so its records wait for this copy."""
        now = time.monotonic()
        if now >= self._next_poll:
            self._next_poll = now + self._poll_interval
            self._act(self._log.poll())
        if self._warm:
            self._read_warm(self._slice if self._handing_over() else budget)
            self._advance_moves()

    def _handing_over(self) -> bool:
        claims, me = self._log.claims, self._me
        for partition in self._warm:
            claim = claims.get(partition)
            if claim is not None and claim.phase == "released" and claim.to == me:
                return True
        return False

    def _act(self, claims: Mapping[Partition, Claim]) -> None:
        for partition, claim in claims.items():
            todo = duty(
                self._me, claim, holding=self._hands.holds(partition), warming=partition in self._warm
            )
            if todo is None:
                continue
            if todo == "take":
                self._stop_warm(partition)  # a copy of a cancelled move may be incomplete: restore
                self._hands.take(partition, None)
            elif todo == "drop":
                _log.warning(
                    "the plan gave %s to %s (epoch %d): dropping it", partition, claim.owner, claim.epoch
                )
                self._hands.drop(partition)
            elif todo == "warm":
                self._start_warm(partition)
            elif todo == "cancel":
                self._stop_warm(partition)
            elif todo == "release":
                self._hands.release(partition, claim.epoch)
                self._log.write({partition: claim.advance("released")})
            elif todo == "finish" and partition not in self._warm:
                self._start_warm(partition)  # a restart lost the copy: read it now, up to the fences
            # otherwise "finish" waits for the fences: _advance_moves
        if claims and self._warm:
            self._advance_moves()

    def _finish(self, partition: Partition, claim: Claim) -> None:
        """Take the partition from its warm copy, read up to the fences, and say so in the plan."""
        warm = self._stop_warm(partition)
        self._hands.take(partition, warm if warm is not None else {})
        self._log.write({partition: claim.advance("owned")})

    def _start_warm(self, partition: Partition) -> None:
        changelogs = self._hands.changelogs(partition)
        self._warm[partition] = changelogs
        if changelogs:
            self._read().start(changelogs)
        _log.info("warming %s[%d] from %d changelog partition(s)", *partition, len(changelogs))

    def _stop_warm(self, partition: Partition) -> dict[Changelog, ChangelogReplay] | None:
        """Stop reading the partition's copy; return it if it exists (it may be incomplete)."""
        changelogs = self._warm.pop(partition, None)
        if changelogs is None:
            return None
        reader = self._reader
        copy = {c: reader.replays[c] for c in changelogs if reader is not None and c in reader.replays}
        still = {c for p in self._warm.values() for c in p}
        gone = [c for c in changelogs if c not in still]
        if reader is not None:
            reader.stop(gone)
        self._reached.difference_update(gone)
        return copy

    def _read_warm(self, seconds: float) -> None:
        reader = self._reader
        if reader is None or not reader.replays:
            return
        for changelog, _replay in reader.read(seconds):
            self._reached.add(changelog)

    def _advance_moves(self) -> None:
        """Say ``ready`` for copies that reached the end; finish moves whose fences were read."""
        reader = self._reader
        for partition, changelogs in list(self._warm.items()):
            claim = self._log.claims.get(partition)
            if claim is None or claim.to != self._me:
                continue
            if claim.phase == "warming" and (partition, claim.epoch) not in self._said_ready:
                if all(c in self._reached for c in changelogs):
                    self._said_ready.add((partition, claim.epoch))
                    self._log.write({partition: claim.advance("ready")})
            elif claim.phase == "released":
                fenced = reader is None or all(
                    c in reader.replays and reader.replays[c].fence >= claim.epoch for c in changelogs
                )
                if fenced:
                    self._finish(partition, claim)

    def _read(self) -> ChangelogReader:
        if self._reader is None:
            consumer, errors = make_consumer(
                self._settings,
                f"{self._log.group}-warm-{uuid.uuid4().hex[:8]}",
                # A small prefetch: the client fetches the copies about as fast as the budget lets
                # the worker read them, not megabytes ahead (the broker's work is paced too).
                **{
                    "fetch.wait.max.ms": 20,
                    "enable.partition.eof": True,
                    "queued.max.messages.kbytes": WARM_PREFETCH_KB,
                },
            )
            self._reader, self._consumer = ChangelogReader(consumer, errors, tail=True), consumer
        return self._reader

    def close(self) -> None:
        consumer, self._consumer, self._reader = self._consumer, None, None
        if consumer is not None:
            consumer.close()
        self._log.close()
