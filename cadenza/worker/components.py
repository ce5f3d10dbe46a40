"""The worker's side features, each behind one small contract instead of woven through its loop.

A :class:`Component` hears of the worker's life in a handful of moments: partitions assigned,
released or lost, the start of each round's fetch, the end of each round, and the close. The
worker lists its components once, when it starts (:meth:`cadenza.worker.runtime.Worker.start`),
and calls each at those moments; a feature that is off is simply not listed. The engine runs
records and the Kafka membership owns partitions (:mod:`cadenza.worker.engine`,
:mod:`cadenza.worker.kafka`); everything else a worker does is here.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import TopicPartition

from cadenza.analysis.kafka_trace import KafkaActivityTrace
from cadenza.feedback.consumer import FeedbackConsumer
from cadenza.infra.metrics import names
from cadenza.infra.metrics.emitter import SpanEmitter
from cadenza.infra.metrics.prometheus import PrometheusExporter
from cadenza.scaling.ownership import OwnershipLog
from cadenza.scaling.rates import TrueRateMeter
from cadenza.scheduling.costs import CostModel
from cadenza.scheduling.scheduler import Scheduler
from cadenza.settings import KafkaSettings
from cadenza.worker.config import WorkerConfig
from cadenza.worker.engine.engine import RunHooks
from cadenza.worker.engine.output import Output
from cadenza.worker.engine.plan import WorkerPlan
from cadenza.worker.kafka.membership import KafkaMembership
from cadenza.worker.kafka.ownership import PlanFollower, warm_read_budget
from cadenza.worker.reliability.crash_slot import CrashSlot, default_crash_dir
from cadenza.worker.reliability.loop_watch import LoopWatch
from cadenza.worker.reliability.quarantine import QuarantineGuard
from cadenza.worker.tuning.hop_estimates import HopEstimates
from cadenza.worker.tuning.rates import RatesPublisher, SubTopologyKey

__all__ = [
    "ActivityTraceComponent",
    "Component",
    "Components",
    "CostFeedback",
    "HopRefresh",
    "LoopWatching",
    "PlanFollowing",
    "QuarantineComponent",
    "RatesComponent",
    "SideFeatures",
    "SpansComponent",
    "plan_following",
    "side_features",
    "tuning_features",
]


#: How long a closing side feature waits for its own records (spans, the activity trace) after the
#: worker failed: a broker that lost their topic would hold the flush for its whole timeout, and the
#: restart (or the process's exit) waits behind it. The quarantine's marks are not such records.
FAILED_FLUSH_S = 1.0


class Component:
    """A side feature of a started worker; every moment does nothing unless overridden."""

    def assigned(self, partitions: list[TopicPartition]) -> None:
        """Partitions were assigned (before any of their records runs)."""

    def released(self, partitions: list[TopicPartition]) -> None:
        """Partitions were revoked cleanly (what finished of them is committed)."""

    def lost(self, partitions: list[TopicPartition]) -> None:
        """Partitions were lost (another worker may already run them)."""

    def before_fetch(self) -> bool:
        """The round is about to fetch; returns whether the fetch may wait for records (a component
        with work of its own between rounds says no)."""
        return True

    def after_round(self) -> None:
        """One round of the loop ended (fetch, run, commit)."""

    def close(self, clean: bool) -> None:
        """The worker stops; ``clean``: it committed what finished (not after a failure)."""


class Components(Component):
    """The listed components, called in order (closed in reverse)."""

    def __init__(self, components: Sequence[Component]) -> None:
        self.components = tuple(components)

    def assigned(self, partitions: list[TopicPartition]) -> None:
        for component in self.components:
            component.assigned(partitions)

    def released(self, partitions: list[TopicPartition]) -> None:
        for component in self.components:
            component.released(partitions)

    def lost(self, partitions: list[TopicPartition]) -> None:
        for component in self.components:
            component.lost(partitions)

    def before_fetch(self) -> bool:
        wait = True
        for component in self.components:
            wait = component.before_fetch() and wait
        return wait

    def after_round(self) -> None:
        for component in self.components:
            component.after_round()

    def close(self, clean: bool) -> None:
        failure: BaseException | None = None
        for component in reversed(self.components):
            try:
                component.close(clean)
            except BaseException as exc:  # every component gets its close; the first failure is raised
                failure = failure or exc
        if failure is not None:
            raise failure


class QuarantineComponent(Component):
    """Poison-pill quarantine (:mod:`.reliability.quarantine`) with this process's crash slot
    (:mod:`.reliability.crash_slot`): the slot's table learns new partitions before any of their
    records runs; a clean release clears their suspicion, a loss does not."""

    def __init__(self, guard: QuarantineGuard, slot: CrashSlot | None) -> None:
        self.guard = guard
        self.slot = slot

    def assigned(self, partitions: list[TopicPartition]) -> None:
        if self.slot is not None:
            self.slot.assign([(tp.topic, tp.partition) for tp in partitions])
        self.guard.assigned(partitions)

    def released(self, partitions: list[TopicPartition]) -> None:
        self.guard.released(partitions)

    def lost(self, partitions: list[TopicPartition]) -> None:
        self.guard.lost(partitions)

    def close(self, clean: bool) -> None:
        try:
            self.guard.close()
        finally:
            if self.slot is not None:  # kept for the next worker unless this one stops cleanly
                self.slot.close(clean=clean)
                self.slot = None


class SpansComponent(Component):
    """Sampled per-operator spans to the spans topic (:mod:`cadenza.infra.metrics.emitter`)."""

    def __init__(self, emitter: SpanEmitter) -> None:
        self.emitter = emitter

    def close(self, clean: bool) -> None:
        if clean:
            self.emitter.close()
        else:
            self.emitter.close(FAILED_FLUSH_S)


class CostFeedback(Component):
    """The stats job's cost statistics, applied to the policy's cost model between rounds."""

    def __init__(self, feedback: FeedbackConsumer, model: CostModel | None) -> None:
        self.feedback = feedback
        self.model = model

    def after_round(self) -> None:
        feedback = self.feedback
        if feedback.pending and self.model is not None:
            feedback.apply_pending(self.model)

    def close(self, clean: bool) -> None:
        self.feedback.close()


class HopRefresh(Component):
    """The repartition hops' recent latency into the path costs (:mod:`.tuning.hop_estimates`)."""

    def __init__(self, hops: HopEstimates) -> None:
        self.hops = hops

    def after_round(self) -> None:
        self.hops.refresh()


class RatesComponent(Component):
    """The worker's true rates on the feedback topic, every rate window (:mod:`.tuning.rates`)."""

    def __init__(self, publisher: RatesPublisher) -> None:
        self.publisher = publisher

    def after_round(self) -> None:
        self.publisher.poll()


class ActivityTraceComponent(Component):
    """The activity trace for ``cadenza analyze`` (:mod:`cadenza.analysis.kafka_trace`)."""

    def __init__(self, trace: KafkaActivityTrace) -> None:
        self.trace = trace

    def after_round(self) -> None:
        self.trace.recorder.poll(time.time())

    def close(self, clean: bool) -> None:
        self.trace.close(None if clean else FAILED_FLUSH_S)


class PlanFollowing(Component):
    """Plan ownership (:mod:`.kafka.ownership`): partitions taken and released as the pool
    controller's plan says, their state copied warm in the slack of the queued records."""

    def __init__(self, follower: PlanFollower, scheduler: Scheduler[Any, Any]) -> None:
        self.follower = follower
        self.scheduler = scheduler
        follower.start()

    def before_fetch(self) -> bool:
        follower = self.follower
        budget = 0.0
        if follower.warming:  # the copies wait for the queued records' slack (warm_read_budget)
            scheduler = self.scheduler
            budget = warm_read_budget(
                scheduler.earliest_start_deadline(), scheduler.clock.now(), follower.read_slice
            )
        follower.step(budget=budget)
        return not follower.warming

    def close(self, clean: bool) -> None:
        self.follower.close()


def plan_following(
    settings: KafkaSettings, config: WorkerConfig, group: str, worker_id: str, membership: KafkaMembership
) -> PlanFollowing | None:
    """The plan's follower under ``ownership = plan``; ``None`` under the group's rebalances."""
    if config.ownership != "plan":
        return None
    follower = PlanFollower(
        OwnershipLog(settings, group, timeout=settings.request_timeout_ms / 1000.0),
        worker_id,
        membership.hands(),
        settings,
        read_slice=config.restore_slice or 0.01,
    )
    return PlanFollowing(follower, membership.engine.scheduler)


class LoopWatching(Component):
    """The loop watch (:mod:`.reliability.loop_watch`): the round's phases are marked as it runs;
    at its end the round is judged, last of the components, so their turn counts in the round."""

    def __init__(
        self, watch: LoopWatch, round_: Callable[[], tuple[bool, int, Callable[[], str | None]]]
    ) -> None:
        self.watch = watch
        #: What the round was: whether its fetch waited, records queued, its slowest quantum's text.
        self.round = round_

    def after_round(self) -> None:
        watch = self.watch
        watch.marks[10] = watch.clock()
        waited, queued, detail = self.round()
        watch.end(waited=waited, queued=queued, run_detail=detail)


@dataclass(frozen=True)
class SideFeatures:
    """The side features a worker's settings ask for, built before its engine (whose run stage some
    of them hook into)."""

    components: list[Component]
    hooks: RunHooks
    guard: QuarantineGuard
    trace: KafkaActivityTrace | None


def side_features(  # noqa: PLR0917 - what the side features read of a starting worker
    config: WorkerConfig,
    settings: KafkaSettings,
    exporter: PrometheusExporter,
    worker_id: str,
    group: str,
    output: Output,
    cost_model: CostModel | None,
) -> SideFeatures:
    """Spans, cost feedback, the activity trace, and the quarantine with this process's crash slot."""
    timeout = settings.request_timeout_ms / 1000.0
    components: list[Component] = []
    emitter = record = trace = None
    if config.spans_topic is not None:
        emitter = SpanEmitter.to_kafka(
            settings, config.spans_topic, worker_id=worker_id, sample_ratio=config.span_sample_ratio
        )
        emitter.start()
        exporter.track_span_emitter(emitter)
        components.append(SpansComponent(emitter))
    if config.feedback_topic is not None:
        feedback = FeedbackConsumer(settings, config.feedback_topic)
        feedback.start(timeout)
        exporter.track_feedback(feedback)
        components.append(CostFeedback(feedback, cost_model))
    if config.activities is not None:
        trace = KafkaActivityTrace(settings, config.activities, worker_id)
        record = trace.recorder.record
        output.trace_header = trace.header
        components.append(ActivityTraceComponent(trace))
    # The marks' owner is this worker object, not only its process: a worker restarted in place
    # must not be taken for the one that died.
    owner = f"{worker_id}#{uuid.uuid4().hex[:6]}"
    guard = QuarantineGuard(
        settings,
        group,
        owner,
        hang_timeout=config.hang_seconds,
        poll_interval=config.max_poll_interval,
        timeout=timeout,
    )
    hooks = RunHooks(emitter=emitter, record=record)
    # Before the join: what a dead worker's crash slot on this host says becomes exact marks.
    slot = CrashSlot.take(config.crash_dir or default_crash_dir(config.state_dir), group, owner)
    if slot is not None:
        guard.recover(slot.dead)
        if slot.settle():
            guard.slot = slot
            hooks = RunHooks(emitter=emitter, record=record, words=slot.words, tags=slot.tags)
        else:
            slot = None
    components.append(QuarantineComponent(guard, slot))
    return SideFeatures(components, hooks, guard, trace)


def tuning_features(  # noqa: PLR0917 - what the tuning reads of a started worker
    config: WorkerConfig,
    plan: WorkerPlan,
    cost_model: CostModel | None,
    exporter: PrometheusExporter,
    rates: TrueRateMeter[SubTopologyKey],
    wall_clock: Callable[[], float],
    worker_id: str,
    output: Output,
) -> list[Component]:
    """Hop estimates, and the true rates published on the feedback topic (if any)."""
    components: list[Component] = []
    model, quantile = cost_model, config.hop_quantile
    readers = [s for s in plan.schedules if not s.from_source]
    if model is not None and quantile > 0.0 and readers:
        hops = [(s.pipeline, s.operator_id, s.arrival) for s in readers]
        components.append(HopRefresh(HopEstimates(model, hops, wall_clock, quantile=quantile)))
        labels = [(s.tenant, s.pipeline, s.operator_id) for s in readers]
        exporter.register_callback(
            names.PLANNED_HOP, lambda: {(t, p, o): model.hop(p, o) for t, p, o in labels}
        )
    if config.feedback_topic is not None:
        publisher = RatesPublisher(rates, worker_id, output.producer, config.feedback_topic)
        components.append(RatesComponent(publisher))
    return components
