"""Who runs which input partition, outside the group protocol: the ownership plan (Megaphone).

A consumer group moves partitions by rebalancing: the partitions that move stop until their new
owner has read their whole state back, and with the eager protocol every partition stops (benchmark
S5). A pool in *plan* ownership instead takes input partitions with ``assign()`` from a plan kept in
the compacted control topic ``cadenza-ownership``, one record per input partition of a group (the
group id is still used, only to commit offsets). The record is a :class:`Claim`; a move from A to B
is four records, each written by the party whose turn it is:

1. ``warming`` (the controller): B starts a warm copy of the partition's state from its changelogs
   while A still runs the partition;
2. ``ready`` (B): the copy has read the changelogs to their end once;
3. ``released`` (A): A committed what finished, wrote a fence record at the epoch into each of the
   partition's changelog partitions, and stopped fetching the partition;
4. ``owned`` by B at ``epoch + 1`` (B): B read its copy up to the fences, installed it and took the
   partition at the committed offset.

The partition stops only between 3 and 4, not for a restore. :func:`duty` is what a worker does
about one claim; :class:`OwnershipLog` reads and writes the topic. ``docs/concepts/scaling.md`` has the
design, including what happens when a worker dies mid-move.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Literal, get_args

from confluent_kafka import KafkaError, TopicPartition

from cadenza.infra.kafka.clients import DeliveryReport, flush_or_raise, make_consumer, make_producer
from cadenza.infra.kafka.topics import TopicSpec
from cadenza.settings import KafkaSettings

__all__ = [
    "OWNERSHIP_TOPIC",
    "Claim",
    "Duty",
    "OwnershipLog",
    "Phase",
    "decode_claim",
    "duty",
    "encode_claim",
    "ownership_topic_spec",
]

OWNERSHIP_TOPIC = "cadenza-ownership"

Phase = Literal["owned", "warming", "ready", "released"]
PHASES: tuple[str, ...] = get_args(Phase)
#: An input ``(topic, partition)``.
Partition = tuple[str, int]


@dataclass(frozen=True)
class Claim:
    """The plan's word on one input partition: ``owner`` runs it (until ``released``); during a move
    ``to`` is the worker it goes to. ``epoch`` grows by one each time the owner changes, so a record
    written by a worker that no longer owns the partition (a zombie) is recognised and ignored."""

    owner: str
    epoch: int = 0
    phase: Phase = "owned"
    to: str | None = None

    def advance(self, phase: Phase) -> Claim:
        """The next record of this move (``owned`` by ``to`` at the next epoch when it ends)."""
        if phase == "owned":
            if self.to is None:
                raise ValueError("a claim without a destination cannot end a move")
            return Claim(self.to, self.epoch + 1)
        return replace(self, phase=phase)


def ownership_topic_spec(topic: str = OWNERSHIP_TOPIC) -> TopicSpec:
    """One partition, so that every record of every group is read in the order it was written."""
    return TopicSpec(topic, partitions=1, configs={"cleanup.policy": "compact"})


def encode_claim(group: str, partition: Partition, claim: Claim) -> tuple[bytes, bytes]:
    """The record's key and value."""
    key = json.dumps([group, partition[0], partition[1]]).encode()
    value = json.dumps({"owner": claim.owner, "epoch": claim.epoch, "phase": claim.phase, "to": claim.to})
    return key, value.encode()


def decode_claim(key: bytes | None, value: bytes | None) -> tuple[str, Partition, Claim]:
    """``(group, partition, claim)``; raises ``ValueError`` saying what is wrong with the record."""
    try:
        group, topic, number = json.loads(key or b"")
        data = json.loads(value or b"")
        owner, epoch, phase, to = data["owner"], data["epoch"], data["phase"], data.get("to")
    except (ValueError, TypeError, KeyError) as exc:
        raise ValueError(f"not an ownership record ({exc}): key {key!r}") from None
    if not (isinstance(group, str) and isinstance(topic, str) and isinstance(number, int)):
        raise ValueError(f"an ownership key is [group, topic, partition], got {key!r}")
    if not isinstance(owner, str) or not isinstance(epoch, int) or phase not in PHASES:
        raise ValueError(f"bad ownership claim {value!r}")
    if to is not None and not isinstance(to, str):
        raise ValueError(f"bad ownership claim {value!r}: 'to' must name a worker")
    if phase != "owned" and to is None:
        raise ValueError(f"bad ownership claim {value!r}: a move ({phase}) needs 'to'")
    return group, (topic, number), Claim(owner, epoch, phase, to)


Duty = Literal["take", "drop", "warm", "cancel", "release", "finish"]


def duty(me: str, claim: Claim, *, holding: bool, warming: bool) -> Duty | None:
    """What worker ``me`` does about the latest claim on a partition it holds (or not) and warms (or not).

    - ``take``: the partition is this worker's and it does not run it (a start, a restart, or a move
      given back): take it, restoring its state;
    - ``drop``: it runs a partition the plan gave to another worker without a hand-over (it was taken
      for dead): stop at once, committing nothing more for it;
    - ``warm``: a move to this worker began: start the warm copy;
    - ``cancel``: it warms a partition that no longer moves to it: drop the copy;
    - ``release``: the warm copy elsewhere is ready: commit, fence, stop (also after a restart, when
      there is nothing left to commit: the fences are what the new owner waits for);
    - ``finish``: the old owner released the partition to this worker: take it once the copy has read
      the fences (the copy is started first if this worker has none, e.g. after a restart).
    """
    if claim.phase == "owned":
        if claim.owner == me:
            return None if holding else "take"
        if holding:
            return "drop"
        return "cancel" if warming else None
    if claim.to == me:
        if claim.phase == "released":
            return "finish"
        return None if warming else "warm"
    if claim.owner == me:
        if claim.phase == "ready":
            return "release"
        if claim.phase == "warming":
            return None if holding else "take"
        return None  # released: the move is the new owner's to end
    if holding:  # another worker's move of a partition this one runs: it was taken for dead
        return "drop"
    return "cancel" if warming else None


class OwnershipLog:
    """The control topic of one group: the latest claim per input partition, and a writer.

    Read with a group-less consumer from the beginning (the compacted topic holds the latest claim of
    every partition), :meth:`poll` without blocking; records of other groups and records that are not
    claims are skipped (the latter counted in ``skipped``).
    """

    def __init__(
        self, settings: KafkaSettings, group: str, topic: str = OWNERSHIP_TOPIC, timeout: float = 30.0
    ) -> None:
        self.settings, self.group, self.topic, self.timeout = settings, group, topic, timeout
        self.claims: dict[Partition, Claim] = {}
        self.skipped = 0
        self._consumer, self._errors = make_consumer(
            self.settings,
            f"cadenza-ownership-reader-{uuid.uuid4().hex[:8]}",
            **{"fetch.wait.max.ms": 20, "enable.partition.eof": True},
        )
        self._consumer.assign([TopicPartition(self.topic, 0, 0)])
        self._producer, self._producer_errors = make_producer(self.settings)
        self._group_key = json.dumps([self.group])[:-1] + ","  # the keys' prefix: '["group",'
        #: Whether the topic was read to its end at least once (the claims are the plan's, not a prefix).
        self.caught_up = False

    def poll(self, timeout: float = 0.0) -> dict[Partition, Claim]:
        """Read what was written since the last poll; return the partitions whose claim changed."""
        changed: dict[Partition, Claim] = {}
        deadline = time.monotonic() + timeout
        while True:
            self._errors.raise_fatal()
            messages = self._consumer.consume(500, max(0.0, deadline - time.monotonic()))
            for message in messages:
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        self.caught_up = True
                    continue
                key = message.key() or b""
                if not key.decode(errors="replace").startswith(self._group_key):
                    continue
                try:
                    _, partition, claim = decode_claim(key, message.value())
                except ValueError:
                    self.skipped += 1
                    continue
                known = self.claims.get(partition)
                if known is not None and claim.epoch < known.epoch:
                    continue  # written by a worker that lost the partition since
                self.claims[partition] = changed[partition] = claim
            if not messages or time.monotonic() >= deadline:
                return changed

    def read_to_end(self) -> dict[Partition, Claim]:
        """Block until the topic was read to its end once (a start); the claims read."""
        deadline = time.monotonic() + self.timeout
        while not self.caught_up:
            if time.monotonic() > deadline:
                raise TimeoutError(f"could not read {self.topic!r} to its end within {self.timeout:g} s")
            self.poll(0.2)
        return dict(self.claims)

    def write(self, claims: Mapping[Partition, Claim]) -> None:
        """Write claims and wait until the broker has them."""
        report = DeliveryReport()
        for partition, claim in claims.items():
            key, value = encode_claim(self.group, partition, claim)
            self._producer.produce(self.topic, value, key, on_delivery=report)
        flush_or_raise(self._producer, report, self.timeout)
        self._producer_errors.raise_fatal()

    def owners(self) -> dict[Partition, str]:
        """Who runs each partition now (a partition in a move is still its old owner's)."""
        return {partition: claim.owner for partition, claim in self.claims.items()}

    def close(self) -> None:
        self._consumer.close()
        self._producer.flush(self.timeout)
