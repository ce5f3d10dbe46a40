"""Rebalance handling: what the worker does when the group assigns, revokes or loses partitions.

Assignment is incremental (cooperative-sticky), or whole (the eager ``range`` assignor, which a
join needs to co-partition its inputs; the worker says which through :attr:`Rebalance.eager`). The
assignment callback starts the restore of the newly assigned partitions' state
(:mod:`cadenza.worker.kafka.restoring`): those that have state to restore are assigned *paused*, so none
of their records is fetched before it is back, and the worker resumes each once its own state is
read. If starting it fails the worker must not run those records on missing state, so the failure
is kept for the run loop to raise (the client may swallow what a callback raises) and the worker is
marked broken (nothing more is committed).

On revocation what finished is committed first and then the partitions' queued records are dropped:
they are handed back, uncommitted, to the partition's next owner. A lost partition belongs to
someone else already: committing for it would fail or, worse, succeed over the new owner's progress,
so its pending offsets, queued records and state are just dropped.

With fetch lanes (:mod:`cadenza.worker.kafka.lanes`) every lane's consumer is a member of the group with
callbacks here: the assignment is the union of theirs, a revocation on any lane commits what
finished on every lane (each through its own consumer), and the worker has joined once every lane
has.

The callbacks run on the thread that polls the consumers (inside ``consume``); the assignment is also
read from other threads (metrics, tests), hence the lock.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

__all__ = ["Rebalance"]

_log = logging.getLogger("cadenza.worker")

#: ``(partitions) -> those to hold``: start bringing the state of newly assigned partitions back;
#: the partitions returned must not be fetched until it is (they are assigned paused). Raises on failure.
Restore = Callable[[list[TopicPartition]], list[TopicPartition]]
#: ``(partitions) -> None``: hear of partitions (see :class:`Rebalance`).
Partitions = Callable[[list[TopicPartition]], None]
#: ``(partitions) -> queued records dropped``: forget partitions everywhere they are held.
Forget = Callable[[list[TopicPartition]], int]


class Rebalance:
    """The consumer's rebalance callbacks, and the assignment and group state they maintain.

    ``restore`` brings assigned partitions' state back; ``commit`` commits what finished (called on
    revocation unless the worker is broken); ``forget`` drops what the worker holds of partitions
    that went (pending offsets, queued records, state, pauses) and returns the records dropped.
    ``assigned``, ``released`` and ``lost`` (optional) hear of partitions assigned (their restore started),
    cleanly handed back after the commit, and lost: the quarantine guard's view of ownership.
    """

    __slots__ = (
        "_assigned",
        "_assignment",
        "_commit",
        "_forget",
        "_joined",
        "_lock",
        "_members",
        "_on_assigned",
        "_on_lost",
        "_on_released",
        "_owned",
        "_restore",
        "broken",
        "changes",
        "eager",
        "failure",
        "joined",
    )

    def __init__(
        self,
        restore: Restore,
        commit: Callable[[], None],
        forget: Forget,
        *,
        assigned: Partitions | None = None,
        released: Partitions | None = None,
        lost: Partitions | None = None,
        members: int = 1,
    ) -> None:
        self._restore = restore
        self._on_assigned = assigned
        self._on_released = released
        self._on_lost = lost
        self._commit = commit
        self._forget = forget
        self._assignment: set[tuple[str, int]] = set()
        self._lock = threading.Lock()
        self._assigned = threading.Event()
        #: Consumers (lanes) of this worker in the group, and those that had an assignment callback.
        self._members = members
        self._joined: set[int] = set()
        #: Partitions by the consumer (``id``) whose callbacks gave them: which lane owns what.
        self._owned: dict[int, set[tuple[str, int]]] = {}
        #: Set by the first assignment callback (even an empty one): the worker has joined its group.
        #: Until then, and while a restore is under way, /readyz says not ready.
        self.joined = False
        #: Counts the assignment's changes (callbacks and the plan's takes, releases and drops), so
        #: that the fetcher asks the clients for their assignment only when it may have changed.
        self.changes = 0
        #: Nothing may be committed any more (a restore failed or the worker is stopping on an error).
        self.broken = False
        #: An error raised inside a callback, re-raised by the run loop.
        self.failure: BaseException | None = None
        #: The group's assignor is an eager one (``range``, which a join needs): an assignment is
        #: taken whole with ``assign``; the client refuses ``incremental_assign`` then (and logs a
        #: warning for it at every rebalance, which is why the worker says which it configured).
        self.eager = False

    @property
    def assignment(self) -> set[tuple[str, int]]:
        with self._lock:
            return set(self._assignment)

    def owned(self, consumer: Consumer | None) -> set[tuple[str, int]]:
        """The partitions assigned through ``consumer``'s callbacks (one lane's share)."""
        with self._lock:
            return set(self._owned.get(id(consumer), ()))

    def wait_assigned(self, timeout: float) -> bool:
        """Block until the group gave this worker partitions and every lane's consumer has joined
        (their restore may still be under way)."""
        return self._assigned.wait(timeout)

    def raise_failure(self) -> None:
        """Raise what a callback failed with, if anything (the client may not have)."""
        if self.failure is not None:
            raise self.failure

    def on_assign(self, consumer: Consumer | None, partitions: list[TopicPartition]) -> None:
        self._assign(consumer, partitions, take=False)

    def take(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Take partitions the ownership plan gave (no rebalance): as an assignment, but the worker
        assigns them itself (incrementally, at their committed offsets)."""
        self._assign(consumer, partitions, take=True)

    def _assign(self, consumer: Consumer | None, partitions: list[TopicPartition], *, take: bool) -> None:
        held: list[TopicPartition] = []
        try:
            held = self._restore(partitions)
            # The plan's takes add to an assignment the worker keeps itself: always incremental.
            if (held or take) and consumer is not None:
                self.eager |= _assign_paused(consumer, partitions, held, eager=self.eager and not take)
            if self._on_assigned is not None:
                self._on_assigned(partitions)
        except BaseException as exc:
            # Records of these partitions must not run on missing state: fail the worker.
            _log.exception("restoring state failed; stopping the worker")
            self.failure = exc
            self.broken = True
            raise
        with self._lock:
            keys = [(tp.topic, tp.partition) for tp in partitions]
            self._assignment.update(keys)
            self._owned.setdefault(id(consumer), set()).update(keys)
        self.changes += 1
        # The group is joined (even with nothing assigned) once every lane's consumer heard from it
        # (whether the state is back too is the restorer's to say: Worker.joined asks both).
        self._joined.add(id(consumer))
        self.joined = len(self._joined) >= self._members
        # "assigned" names what runs from now on: a partition waiting for its state is assigned (its
        # records run) only once the worker resumes it (benchmark S5 reads these lines).
        waiting = {(tp.topic, tp.partition) for tp in held}
        running = [tp for tp in partitions if (tp.topic, tp.partition) not in waiting]
        _log.info("assigned %s", _names(running) or "nothing")
        if held:
            _log.info("restoring %s (paused until their state is back)", _names(held))
        # Assigned once every lane has heard from the group: a worker whose bulk lane joined first
        # must not be taken as ready while its urgent lane's partitions are still on their way.
        if self.joined and self._assignment:
            self._assigned.set()

    def on_revoke(self, consumer: Consumer | None, partitions: list[TopicPartition]) -> None:
        if not self.broken:
            self._commit()
            if self._on_released is not None:
                self._on_released(partitions)
        self._drop(consumer, partitions, "revoked")

    def on_lost(self, consumer: Consumer | None, partitions: list[TopicPartition]) -> None:
        if self._on_lost is not None:
            self._on_lost(partitions)
        self._drop(consumer, partitions, "lost")

    def _drop(self, consumer: Consumer | None, partitions: list[TopicPartition], why: str) -> None:
        if consumer is not None and partitions:
            # librdkafka keeps an application pause across an incremental unassign and assign: a
            # partition the flow control paused before it went would come back paused, while the
            # worker forgets it was (and so never resumes it): it would never be fetched again. So a
            # partition leaves unpaused.
            try:
                consumer.resume(partitions)
            except KafkaException as exc:
                _log.warning("could not resume %s before it left: %s", _names(partitions), exc)
        dropped = self._forget(partitions)
        keys = [(tp.topic, tp.partition) for tp in partitions]
        with self._lock:
            self._assignment.difference_update(keys)
            self._owned.get(id(consumer), set()).difference_update(keys)
        self.changes += 1
        if partitions:
            _log.info("%s %s (%d queued record(s) handed back)", why, _names(partitions), dropped)


def _assign_paused(
    consumer: Consumer, partitions: list[TopicPartition], held: list[TopicPartition], *, eager: bool
) -> bool:
    """Take the assignment now (the client would right after the callback) and pause ``held`` before
    anything of theirs is fetched: incrementally under the cooperative protocol, whole with ``assign``
    under the eager one. Returns whether the protocol turned out eager (a consumer configured with an
    eager assignor the worker did not know of refuses the incremental call)."""
    refused = False
    if eager:
        consumer.assign(partitions)
    else:
        try:
            consumer.incremental_assign(partitions)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError._STATE:  # the eager protocol's refusal; anything else is real
                raise
            consumer.assign(partitions)
            refused = True
    if held:
        consumer.pause(held)
    return refused


def _names(partitions: Iterable[TopicPartition]) -> str:
    return ", ".join(f"{tp.topic}[{tp.partition}]" for tp in partitions)
