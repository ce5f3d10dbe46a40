"""A worker's membership of its consumer group: the partitions it owns and what it commits of them.

One consumer per fetch lane (:mod:`.lanes`) reads the lane's topics in the one group; the fetcher
(:mod:`.fetcher`) takes records from them under flow control. Rebalances (:mod:`.rebalance`;
cooperative-sticky, so assignments are incremental) decide what the worker owns: a newly assigned
partition with window or join state is assigned paused, and its state is read back from its
changelog a slice at a time between runs of records (:mod:`.restoring`); the partition is resumed
once its own state is back, while the others run on. On revocation what finished is committed and
the queued records of the revoked partitions are dropped from the engine: they are handed back,
uncommitted, to the partition's next owner. Under plan ownership (:mod:`.ownership`) the same paths
take and release partitions, driven by the plan instead of the group, and a moved partition's state
comes from a warm copy.

Commits (:mod:`.checkpoint`) happen every ``commit_interval`` or when the buffer runs dry, without
waiting: a checkpoint takes the committable offset of each partition (below it every record's units
ran, despite the reordering) and the window changelog writes, and seals the output's epoch; later
rounds write the changelog once those outputs are acknowledged and commit the offsets once the
changelog is, each partition's through the lane consumer that owns it. So a committed offset always
has every output and every state write of the records below it acknowledged: at-least-once.

What the worker's side features need to hear of ownership (the quarantine guard, the crash slot)
they hear through :class:`Listener`; the records themselves are the engine's
(:class:`~cadenza.worker.engine.engine.Engine`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, Protocol

from confluent_kafka import Consumer, Message, TopicPartition

from cadenza.errors import CadenzaError
from cadenza.infra.kafka.clients import DEFAULT_ASSIGNOR, ClientErrors, make_consumer
from cadenza.settings import KafkaSettings
from cadenza.state import ChangelogReplay
from cadenza.worker.config import WorkerConfig
from cadenza.worker.engine.context_stamps import TaskSchedule
from cadenza.worker.engine.dead_letter import PipelineStoppedError
from cadenza.worker.engine.engine import Engine
from cadenza.worker.engine.idle_clock import IdleClock
from cadenza.worker.engine.output import Output
from cadenza.worker.kafka.checkpoint import Checkpoint, Record
from cadenza.worker.kafka.fetcher import Fetcher, FlowControl
from cadenza.worker.kafka.lanes import Lane
from cadenza.worker.kafka.ownership import Hands
from cadenza.worker.kafka.rebalance import Rebalance
from cadenza.worker.kafka.restoring import StateRestorer

__all__ = ["KafkaMembership", "Listener"]

_log = logging.getLogger("cadenza.worker")


class Listener(Protocol):
    """A side feature that follows what the worker owns (see :mod:`cadenza.worker.components`)."""

    def assigned(self, partitions: list[TopicPartition]) -> None: ...

    def released(self, partitions: list[TopicPartition]) -> None: ...

    def lost(self, partitions: list[TopicPartition]) -> None: ...


def consumer_settings(config: WorkerConfig, joins: bool) -> tuple[dict[str, Any], bool]:
    """What every lane's consumer is given beyond its lane's fetch bounds, and whether the assignor
    is eager (not cooperative)."""
    overrides: dict[str, Any] = {
        # Statistics each second tell when a broker is reachable again after an outage (see
        # ClientErrors.statistics): that drives cadenza_broker_reachable and /readyz.
        "statistics.interval.ms": 1000,
        "max.poll.interval.ms": round(config.max_poll_interval * 1000),
    }
    if joins:
        # A join needs partition p of both its inputs on one worker; the range assignor gives that
        # for co-partitioned topics, cooperative-sticky does not.
        overrides["partition.assignment.strategy"] = "range"
    merged = {**overrides, **config.consumer_overrides}
    eager = "cooperative" not in str(merged.get("partition.assignment.strategy", DEFAULT_ASSIGNOR))
    return merged, eager


class KafkaMembership:
    """The group side of a started worker: consumers, fetcher, rebalances, restores and commits."""

    def __init__(
        self,
        settings: KafkaSettings,
        config: WorkerConfig,
        group: str,
        lanes: Sequence[Lane],
        engine: Engine,
        *,
        output: Output,
        idle_clock: IdleClock,
        listener: Listener,
        settle: Callable[[], None],
        joins: bool = False,
        shares: bool = True,
        record: Record | None = None,
    ) -> None:
        self.settings = settings
        self.config = config
        self.group = group
        self.lanes = list(lanes)
        self.engine = engine
        self.output = output
        self.idle_clock = idle_clock
        counters = engine.counters
        plan = engine.plan
        #: Partitions whose state a plan move installed from a warm copy: not restored again.
        self._installed: set[tuple[str, int]] = set()
        self.restorer = StateRestorer(
            settings,
            group,
            counters,
            config.restore_timeout,
            background=config.restore_slice > 0,
            idle_clock=idle_clock,
            settle=settle,
        )
        self.rebalance = Rebalance(
            self._restore,
            self._commit_on_revoke,
            self._forget,
            assigned=listener.assigned,
            released=listener.released,
            lost=listener.lost,
            members=len(self.lanes),
        )
        self.flow = FlowControl(config.max_buffered, fanout=plan.fanout, lanes=len(self.lanes), shares=shares)
        # A trickle of records runs the buffer dry after each one: commit then at most every poll.
        self.checkpoint = Checkpoint(
            counters,
            config.commit_interval,
            inflight=engine.inflight,
            output=output,
            windows=plan.windows,
            dry_interval=config.poll_timeout,
            record=record,
        )
        overrides, self.rebalance.eager = consumer_settings(config, joins)
        #: One consumer per lane, in :attr:`lanes`' order, with its error handler (empty once closed).
        self.consumers: list[tuple[Consumer, ClientErrors]] = [
            make_consumer(settings, group, **{**overrides, **lane.fetch, **config.consumer_overrides})
            for lane in self.lanes
        ]
        self.fetcher = Fetcher(
            [(consumer, lane.topics) for (consumer, _), lane in zip(self.consumers, self.lanes, strict=True)],
            self.flow,
            counters,
            batch_size=config.batch_size,
            poll_timeout=config.poll_timeout,
            assignment_changes=lambda: self.rebalance.changes,
        )

    # -- joining ------------------------------------------------------------------------------------

    def join(self) -> None:
        """Subscribe every lane to its topics; under plan ownership none joins the group (the plan's
        follower, :func:`plan_follower`, takes and releases partitions through :meth:`hands`)."""
        rebalance = self.rebalance
        routes = self.engine.plan.routes
        by_group = self.config.ownership == "group"
        for (consumer, _), lane in zip(self.consumers, self.lanes, strict=True):
            # Disjoint subscriptions in the one group: each partition has one owner, one lane.
            topics = [topic for topic in routes if topic in lane.topics]
            if topics and by_group:
                consumer.subscribe(
                    topics,
                    on_assign=rebalance.on_assign,
                    on_revoke=rebalance.on_revoke,
                    on_lost=rebalance.on_lost,
                )
            else:  # a lane of a stopped layout, or plan ownership: it never joins the group, so it must
                rebalance.on_assign(consumer, [])  # not hold /readyz back
        self.checkpoint.last = time.monotonic()

    @property
    def assignment(self) -> set[tuple[str, int]]:
        return self.rebalance.assignment

    @property
    def joined(self) -> bool:
        """Whether the group was joined at least once and what it gave is restored."""
        return self.rebalance.joined and not self.restorer.restoring

    @property
    def brokers_up(self) -> bool:
        return all(errors.brokers_up for _, errors in self.consumers)

    # -- each round ---------------------------------------------------------------------------------

    def raise_fatal(self) -> None:
        for _, errors in self.consumers:
            errors.raise_fatal()

    @property
    def restoring(self) -> bool:
        return self.restorer.restoring

    def hands(self) -> Hands:
        """What a plan follower takes and releases partitions through (plan ownership)."""
        return _PlanHands(self)

    def fetch(self, buffered: int, pressure: bool, *, block: bool) -> list[Message]:
        idle_clock = self.idle_clock
        idle_clock.fetch_started()
        messages = self.fetcher.fetch(buffered, pressure, block=block)
        idle_clock.fetch_ended()
        self.rebalance.raise_failure()
        return messages

    def restore_step(self) -> None:
        """Read changelogs for up to ``restore_slice``; resume the partitions whose state is back."""
        restorer = self.restorer
        if not restorer.restoring:
            return
        try:
            ready = restorer.step(self.config.restore_slice)
        except BaseException:
            self.rebalance.broken = True  # records must not run on missing state: nothing is committed
            raise
        if ready:
            for topic, partition in ready:
                self.fetcher.owner(topic).resume([TopicPartition(topic, partition)])
            _log.info("assigned %s (state restored)", ", ".join(f"{t}[{p}]" for t, p in ready))

    def flow_control(self) -> None:
        """Pause and resume partitions for the buffer as it is now (see :mod:`.fetcher`)."""
        if not self.consumers:
            return
        fetcher, engine = self.fetcher, self.engine
        was_full = fetcher.flow.full
        fetcher.regulate(
            len(engine.scheduler),
            engine.queued,
            engine.held,
            self.output.pressure,
            waiting=self.restorer.holding,
        )
        full = fetcher.flow.full
        if full != was_full:  # every partition paused: the worker reads nothing (see idle_clock.py)
            if full:
                self.idle_clock.stall()
            else:
                self.idle_clock.unstall()

    def checkpoint_step(self, now: float, *, worked: bool) -> None:
        """Take a checkpoint when due and move the open ones on, without waiting."""
        checkpoint = self.checkpoint
        if checkpoint.due(now, worked=worked, buffered=len(self.engine.scheduler)):
            checkpoint.take()
        if checkpoint.open:
            checkpoint.advance(self.committing())

    def waiting(self, topic: str) -> list[int]:
        """The assigned partitions of ``topic`` whose records wait in this worker: queued, paused or
        waiting for their state. Their silence downstream is this worker's doing, not their input's,
        so the engine sends heartbeats for them (see ``docs/concepts/watermarks.md``)."""
        paused = self.flow.paused
        holding = self.restorer.holding
        queued = self.engine.queued
        return [
            partition
            for assigned, partition in self.assignment
            if assigned == topic
            and ((topic, partition) in paused or (topic, partition) in holding or queued(topic, partition))
        ]

    def pipeline_stopped(
        self, stopped: PipelineStoppedError, schedules: Sequence[TaskSchedule], dropped: int
    ) -> None:
        """A pipeline stopped (:meth:`cadenza.worker.engine.engine.Engine.stop_pipeline`): its input stays
        uncommitted from the failed record on and paused, and its state leaves the changelog, so that a
        restart resumes at that record on state the replay builds on."""
        windows = [window for schedule in schedules for window in schedule.task.windows]
        self.checkpoint.stop_changelogging(windows)
        _log.error(
            "%s; its input from %s[%d] at offset %d on stays uncommitted (%d queued record(s) held) "
            "and its partitions are paused; the worker runs its other pipelines. Fix the step (or "
            "the data) and restart the worker to resume from that record.",
            stopped,
            stopped.topic,
            stopped.partition,
            stopped.offset,
            dropped,
            exc_info=stopped.cause,
        )

    # -- commits ------------------------------------------------------------------------------------

    def commit(self) -> None:
        """Commit everything that finished, waiting until it is durable (see :mod:`.checkpoint`)."""
        self.checkpoint.commit(self.committing())

    def committing(self) -> list[tuple[Consumer, Collection[str] | None]]:
        """The consumers that commit, each with the topics whose offsets it owns (``None``: all)."""
        consumers = self.consumers
        if len(consumers) == 1:
            return [(consumers[0][0], None)]
        # each partition's offset through the consumer that owns it (none once closed)
        return [(consumer, lane.topics) for (consumer, _), lane in zip(consumers, self.lanes, strict=False)]

    def _commit_on_revoke(self) -> None:
        # What finished is committed before revoked partitions go (the rebalance handler skips this
        # once the worker failed: then nothing may be committed).
        self.commit()

    # -- ownership changes --------------------------------------------------------------------------

    def _restore(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        """Start restoring newly assigned partitions' state; return those that wait for it (paused).

        While any waits, window inputs' idle timeouts stand still (the restorer stalls the idle clock)."""
        installed = self._installed
        stateful = self.engine.stateful
        held = set(
            self.restorer.begin(
                ((tp.topic, tp.partition), stateful(tp.topic, tp.partition))
                for tp in partitions
                if (tp.topic, tp.partition) not in installed
            )
        )
        installed.difference_update((tp.topic, tp.partition) for tp in partitions)
        return [tp for tp in partitions if (tp.topic, tp.partition) in held]

    def _forget(self, partitions: list[TopicPartition]) -> int:
        """Drop what the worker holds of partitions that went; returns the queued records dropped.

        Their queued records are run again by the next owner, from the last committed offset."""
        keys = [(tp.topic, tp.partition) for tp in partitions]
        stateful = self.engine.stateful
        self.checkpoint.forget(partitions, [pair for key in keys for pair in stateful(*key)])
        self.restorer.forget(keys)
        self.flow.forget(set(keys))
        return self.engine.forget(keys)

    # -- leaving ------------------------------------------------------------------------------------

    def leave(self, *, commit: bool) -> None:
        """Leave the group, committing what finished first unless the worker failed."""
        consumers, self.consumers = self.consumers, []
        if commit and consumers and not self.rebalance.broken:
            self.consumers = consumers  # the commit goes through them
            try:
                self.commit()
            finally:
                self.consumers = []
        for consumer, _ in consumers:
            consumer.close()  # the revoke callback drops what is still queued

    def abandon(self) -> None:
        """Leave the group now, committing nothing (another thread; the process exits next)."""
        self.rebalance.broken = True
        consumers, self.consumers = self.consumers, []
        for consumer, _ in consumers:
            consumer.close()

    def close(self) -> None:
        self.restorer.close()


class _PlanHands:
    """The membership's side of plan ownership (:class:`~cadenza.worker.kafka.ownership.Hands`):
    taking and releasing partitions goes through the rebalance handler, as if the group had assigned
    or revoked them, so commits, restores, the quarantine guard and the log lines stay the same."""

    def __init__(self, membership: KafkaMembership) -> None:
        self._membership = membership

    def _consumer(self, topic: str) -> Consumer:
        membership = self._membership
        for (consumer, _), lane in zip(membership.consumers, membership.lanes, strict=True):
            if topic in lane.topics:
                return consumer
        raise CadenzaError(f"topic {topic!r} is not read by this worker")

    def holds(self, partition: tuple[str, int]) -> bool:
        return partition in self._membership.rebalance.assignment

    def changelogs(self, partition: tuple[str, int]) -> list[tuple[str, int]]:
        return [(step.changelog_topic, part) for step, part in self._membership.engine.stateful(*partition)]

    def take(
        self, partition: tuple[str, int], warm: Mapping[tuple[str, int], ChangelogReplay] | None
    ) -> None:
        membership = self._membership
        topic, number = partition
        if warm is not None:
            counters = membership.engine.counters
            for step, part in membership.engine.stateful(topic, number):
                replay = warm.get((step.changelog_topic, part))
                entries = replay.entries() if replay is not None else {}
                step.restore(part, entries, replay.position if replay is not None else None)
                counters.restored_keys += len(entries)
                _log.info(
                    "restored %s[%d]: %d keys from %d changelog records (warm copy); %s",
                    step.changelog_topic,
                    part,
                    len(entries),
                    replay.records if replay is not None else 0,
                    replay.position if replay is not None else None,
                )
            membership._installed.add(partition)
            counters.warm_installs += 1
        # No offset: the group's committed one, which the old owner committed before it released.
        membership.rebalance.take(self._consumer(topic), [TopicPartition(topic, number)])

    def release(self, partition: tuple[str, int], epoch: int) -> None:
        membership = self._membership
        topic, number = partition
        if self.holds(partition):
            consumer = self._consumer(topic)
            tp = TopicPartition(topic, number)
            membership.rebalance.on_revoke(consumer, [tp])  # commits what finished, then drops it
            consumer.incremental_unassign([tp])
        # After the commit: everything this worker wrote to the state comes before the fences.
        membership.output.fence(self.changelogs(partition), epoch)

    def drop(self, partition: tuple[str, int]) -> None:
        topic, number = partition
        consumer = self._consumer(topic)
        tp = TopicPartition(topic, number)
        self._membership.rebalance.on_lost(consumer, [tp])
        consumer.incremental_unassign([tp])
