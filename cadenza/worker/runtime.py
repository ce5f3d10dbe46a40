"""The worker: the engine, a membership of a Kafka consumer group, and a process around them.

``Worker(pipelines, settings, config, process=..., parts=...)`` checks the pipelines and plans what
can be planned without a broker (sub-topologies, fetch and produce lanes, the policy). :meth:`start`
asks the cluster for its topics and the group's plan (:mod:`.cluster`), builds the engine
(:mod:`.engine.engine`: admission, run stage, timers, produce), the group membership
(:mod:`.kafka.membership`: consumers, rebalances, restores, commits) and the side features
(:mod:`.components`), each complete, and joins the group. Each :meth:`step` is one round:

fetch (:mod:`.kafka.fetcher`), decode and admit (:meth:`Engine.admit
<cadenza.worker.engine.engine.Engine.admit>`, through the quarantine guard while a partition is
suspect), run by the policy's priority for ``run_slice`` (:mod:`.engine.executor`; operators produce
as they run), timers and progress records, commit without waiting (:mod:`.kafka.checkpoint`), then
the side features' turn. ``docs/architecture.md`` has the table of steps and files.

:meth:`run` is the process around the loop: it serves the metrics endpoint and announces it
(:mod:`.process`), and starts the worker again after a Kafka client failure it cannot survive in
place (:mod:`.reliability.restarts`). :meth:`serve` adds what ``cadenza worker`` does for signals.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from confluent_kafka import Message

from cadenza.analysis.kafka_trace import KafkaActivityTrace
from cadenza.errors import CadenzaError
from cadenza.infra.metrics import names
from cadenza.infra.metrics.prometheus import PrometheusExporter
from cadenza.pipelines import Pipeline, PipelineGraph
from cadenza.scheduling.costs import CostModel
from cadenza.scheduling.scheduler import Scheduler
from cadenza.settings import KafkaSettings
from cadenza.state.factory import store_factory
from cadenza.worker.cluster import prepare_cluster
from cadenza.worker.components import (
    Components,
    LoopWatching,
    PlanFollowing,
    plan_following,
    side_features,
    tuning_features,
)
from cadenza.worker.config import ProcessConfig, WorkerConfig, settings_in_effect
from cadenza.worker.engine.context_stamps import TaskSchedule
from cadenza.worker.engine.counters import WorkerCounters
from cadenza.worker.engine.dead_letter import PipelineStoppedError
from cadenza.worker.engine.decode import make_registry_client
from cadenza.worker.engine.engine import Engine, EngineTransport
from cadenza.worker.engine.idle_clock import READ_GAP, IdleClock
from cadenza.worker.engine.lessees.cores import available_cores
from cadenza.worker.engine.lessees.hub import LesseeHub
from cadenza.worker.engine.output import Output
from cadenza.worker.engine.plan import WorkerPlan, assemble
from cadenza.worker.gauges import track_worker
from cadenza.worker.kafka.membership import KafkaMembership
from cadenza.worker.layout import WorkerLayout, default_group, make_policy
from cadenza.worker.parts import WorkerParts
from cadenza.worker.process import MetricsEndpoint, stop_on_signals
from cadenza.worker.reliability.loop_watch import LoopWatch
from cadenza.worker.reliability.quarantine import QuarantineGuard
from cadenza.worker.reliability.restarts import RestartBudget
from cadenza.worker.tuning.gc_tuning import GcTuning
from cadenza.worker.tuning.rates import track_true_rates

__all__ = ["Worker"]

_log = logging.getLogger("cadenza.worker")
#: Longest a round with nothing fetched and nothing run waits for a lessee's answer (records that
#: arrive meanwhile wait at most this long).
LESSEE_WAIT = 0.005


class Worker:
    """Runs pipelines until :meth:`stop`. Use :meth:`run` (or :meth:`serve`, as ``cadenza worker``
    does) in the thread that owns the worker.

    ``pipelines`` are :class:`~cadenza.pipelines.Pipeline` objects (compiled here) or compiled graphs.
    ``settings``: where the cluster is (default: ``KafkaSettings.load()``, the ``CADENZA_*``
    variables); ``config``: every setting of the worker (default: ``WorkerConfig.load()``);
    ``process``: the settings of its process, metrics endpoint, discovery, restarts and stop timeout
    (default: ``ProcessConfig.load()``); ``parts``: objects that are code, not settings (a policy
    object, a store factory, a clock, an exporter). Construction checks the pipelines (an
    unsupported step raises, naming the pipeline and step) and the settings.
    """

    #: Seconds of each rate window (None: ``CADENZA_RATE_WINDOW_S`` or 10 s; see :mod:`.tuning.rates`).
    rate_window_s: float | None = None

    def __init__(
        self,
        pipelines: Sequence[Pipeline | PipelineGraph],
        settings: KafkaSettings | None = None,
        config: WorkerConfig | None = None,
        *,
        process: ProcessConfig | None = None,
        parts: WorkerParts | None = None,
    ) -> None:
        self.settings = settings if settings is not None else KafkaSettings.load()
        self.config = config = config if config is not None else WorkerConfig.load()
        self.process = process if process is not None else ProcessConfig.load()
        self.parts = parts = parts if parts is not None else WorkerParts()
        self.layout = WorkerLayout.of(pipelines, config, self.settings)
        self.graphs = self.layout.graphs
        self.group = config.group or default_group(self.graphs)
        self.worker_id = config.worker_id or f"{socket.gethostname()}-{os.getpid()}"
        self.policy = make_policy(parts.policy or config.policy, self.graphs)
        self.exporter = parts.exporter or PrometheusExporter()
        self.counters = WorkerCounters()
        #: What window and join steps measure their inputs' idle timeouts on.
        self.idle_clock = IdleClock(read_gap=READ_GAP)
        #: Rounds of the loop that kept records waiting ``stall_threshold`` (:mod:`.reliability.loop_watch`).
        self.loop_watch = LoopWatch(config.stall_threshold_ms / 1000.0)
        self._gc = GcTuning(config.gc_young_threshold)
        self._stores = parts.state_store or store_factory(config.state_store, config.state_dir)
        self._stop = threading.Event()
        self._started = threading.Event()
        self._engine: Engine | None = None
        self._membership: KafkaMembership | None = None
        self._output: Output | None = None
        self._components = Components(())
        self._trace: KafkaActivityTrace | None = None
        self._guard: QuarantineGuard | None = None
        self._following: PlanFollowing | None = None
        self._queued = 0  # records queued in the round (for the loop watch)
        #: Whether this worker joined its group once (a later failure is then restartable).
        self._joined_once = False
        #: What the started worker runs (:mod:`.engine.plan`); ``None`` until :meth:`start`.
        self.plan: WorkerPlan | None = None

    # -- what it runs ---------------------------------------------------------------------------------

    def describe(self) -> str:
        """A human summary: pipelines, tenants, sub-topologies and topics."""
        return self.layout.describe(self.group, self.policy.name)

    def settings_in_effect(self) -> dict[str, Any]:
        """Every setting as this worker uses it (what ``cadenza worker --check`` prints)."""
        return settings_in_effect(
            self.config, self.process, group=self.group, worker_id=self.worker_id, policy=self.policy.name
        )

    @property
    def engine(self) -> Engine:
        """What runs the records (:mod:`.engine.engine`); there once started (and after the worker
        closed, for a look at what it ran)."""
        if self._engine is None:
            raise CadenzaError("the worker is not started")
        return self._engine

    @property
    def membership(self) -> KafkaMembership:
        """The group membership (:mod:`.kafka.membership`); there once started."""
        if self._membership is None:
            raise CadenzaError("the worker is not started")
        return self._membership

    @property
    def scheduler(self) -> Scheduler:  # type: ignore[type-arg]
        return self.engine.scheduler

    @property
    def stopped(self) -> dict[str, PipelineStoppedError]:
        """Pipelines stopped by a failed step (``on_error="stop"``), with what stopped them."""
        return self._engine.stopped if self._engine is not None else {}

    @property
    def assignment(self) -> set[tuple[str, int]]:
        membership = self._membership
        return membership.assignment if membership is not None else set()

    def wait_assigned(self, timeout: float) -> bool:
        """Block until the group gave this worker partitions (and their state is restored)."""
        until = time.monotonic() + timeout
        if not self._started.wait(timeout):
            return False
        membership = self.membership
        return membership.rebalance.wait_assigned(max(0.0, until - time.monotonic())) and (
            membership.restorer.settled.wait(max(0.0, until - time.monotonic()))
        )

    @property
    def joined(self) -> bool:
        """Whether the worker has joined its group at least once and restored what it was given."""
        membership = self._membership
        return membership is not None and membership.joined

    @property
    def buffered(self) -> int:
        """Units queued in the scheduler (what ``max_buffered`` bounds)."""
        return len(self._engine.scheduler) if self._engine is not None else 0

    @property
    def cost_model(self) -> CostModel | None:
        """The policy's cost model, if it keeps one (every built-in does)."""
        return self.policy.cost_model

    # -- life cycle -------------------------------------------------------------------------------------

    def start(self) -> None:
        """Create missing topics, build the engine and the membership, join the group."""
        if self._started.is_set():
            return
        config, settings = self.config, self.settings
        topics = prepare_cluster(settings, config, self.group, self.worker_id, self.layout.subtopologies)
        # Statistics each second: the requests it sends (cadenza_kafka_requests_total).
        output = self._output = Output.for_lanes(
            settings, self.layout.produce_lanes, **{"statistics.interval.ms": 1000}
        )
        features = side_features(
            config, settings, self.exporter, self.worker_id, self.group, output, self.cost_model
        )
        self._trace, self._guard, hooks = features.trace, features.guard, features.hooks
        self.plan = plan = assemble(
            self.layout.subtopologies,
            output=output,
            counters=self.counters,
            policy=self.policy,
            exporter=self.exporter,
            emitter=hooks.emitter,
            partitions={spec.name: spec.partitions for spec in topics},
            idle_timeout=config.watermark_idle_timeout or None,
            store_factory=self._stores,
            registry_client=make_registry_client(settings),
            clock=self.idle_clock.now,
            wall_clock=self._wall_clock,
            lessees=LesseeHub(
                cores=config.cores or available_cores(),
                max_threads=config.max_thread_lessees,
                warm=config.warm_lessees,
                idle_release=config.lessee_idle_release,
                wall=self._wall_clock,
            ),
            read_clock=self.idle_clock,
        )
        scheduler: Scheduler = Scheduler(  # type: ignore[type-arg]
            self.policy,
            clock=self.parts.clock,
            max_records=config.quantum_records,
            max_seconds=config.quantum_ms / 1000.0,
        )
        self._engine = engine = Engine(
            plan,
            scheduler,
            EngineTransport(output, waiting=self._waiting, stopped=self._pipeline_stopped),
            counters=self.counters,
            read_clock=self.idle_clock,
            progress_interval=config.progress_interval_ms / 1000.0,
            idle_timeout=config.watermark_idle_timeout or None,
            hooks=hooks,
        )
        self.rates = track_true_rates(self.exporter, plan.schedules, window_s=self.rate_window_s)
        tuning = tuning_features(
            config, plan, self.cost_model, self.exporter, self.rates, self._wall_clock, self.worker_id, output
        )
        listener = Components([*features.components, *tuning])  # what hears of ownership changes
        self._membership = membership = KafkaMembership(
            settings,
            config,
            self.group,
            self.layout.lanes,
            engine,
            output=output,
            idle_clock=self.idle_clock,
            listener=listener,
            settle=self._settle_gc,
            joins=self.layout.joins,
            shares=self.layout.shares,
            record=hooks.record,
        )
        track_worker(
            self.exporter,
            self.graphs,
            engine,
            membership,
            output=output,
            loop_watch=self.loop_watch,
            guard=features.guard,
        )
        self._following = plan_following(settings, config, self.group, self.worker_id, membership)
        following = [self._following] if self._following is not None else []
        executor = engine.executor
        watching = LoopWatching(
            self.loop_watch, lambda: (membership.fetcher.waited, self._queued, executor.slowest_quantum)
        )
        # The loop watch last: the others' turn counts in the round it judges.
        self._components = Components([*listener.components, *following, watching])
        membership.join()
        self._started.set()
        self._gc.acquire()  # the plan and clients are built: they leave the collector's walks
        _log.info(
            "worker started in group %s with policy %s, reading %s",
            self.group,
            self.policy.name,
            self.layout.reads(),
        )

    @property
    def _wall_clock(self) -> Callable[[], float]:
        """What process steps' wall-clock timers are measured on: the injected clock, else epoch time."""
        clock = self.parts.clock
        return clock.now if clock is not None else time.time

    def _hung(self, failure: BaseException) -> None:
        # From the watchdog: a user call ran past max.poll.interval.ms; raised after it returns.
        self.membership.rebalance.failure = failure
        self.exporter.health.live = False

    def stop(self) -> None:
        """Ask the worker to stop after the step in flight; safe from any thread or signal handler."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def serve(self, *, say: Callable[[str], None] | None = None) -> None:
        """:meth:`run`, stopped by SIGINT or SIGTERM within ``stop_timeout`` (main thread only): what
        ``cadenza worker`` does. ``say`` is told what the process serves and announces."""
        with stop_on_signals(self.stop, self.abandon, self.process.stop_timeout):
            self.run(say=say)

    def run(self, *, say: Callable[[str], None] | None = None) -> None:
        """Process until :meth:`stop`, then commit what finished and leave the group.

        Serves the metrics endpoint (``metrics_port``) and announces it; after a Kafka client failure
        the worker cannot survive in place, starts again from the last committed offsets
        (``max_restarts``, with a fresh metrics registry, as a new process would). Records still
        queued at the stop are handed back uncommitted; other exceptions propagate, uncommitted.
        """
        endpoint = MetricsEndpoint(self.process, self.settings, say=say)
        budget = RestartBudget(self.process.max_restarts)

        def incarnation() -> None:
            self.exporter.register_callback(names.WORKER_RESTARTS, lambda: budget.restarts)
            endpoint.serve(self.exporter, self.worker_id, self.group, [g.name for g in self.graphs])
            self._run_once()

        def afresh() -> None:  # what a new process would have
            self.exporter = PrometheusExporter()

        try:
            budget.run(incarnation, self._stop, joined=lambda: self._joined_once, afresh=afresh)
        finally:
            endpoint.close()

    def _run_once(self) -> None:
        try:
            self.start()  # subscribes; ready only once the group join and restore are done (step)
            guard = self._guard  # the hang watchdog reads this thread's quantum loop
            assert guard is not None
            guard.watch(threading.get_ident(), type(self.engine.executor).run_quantum.__code__, self._hung)
            while not self._stop.is_set():
                self.step()
        except BaseException as exc:
            # Whatever ends the worker (a signal's KeyboardInterrupt included) is said at ERROR level:
            # a worker must never vanish without a line saying why.
            _log.error("the worker stops, uncommitted: %s: %s", type(exc).__name__, exc)
            if self._membership is not None:
                self._membership.rebalance.broken = True
            self.exporter.health.live = False
            raise
        finally:
            self.exporter.health.ready = False
            self.close()

    def abandon(self) -> None:
        """Leave the group now, committing nothing: for a stop that cannot wait for the step in flight
        (a user function that hangs). Called from another thread, so only right before the process
        exits: the records in flight stay uncommitted and the group's next owner runs them."""
        if self._membership is not None:
            self._membership.abandon()

    def close(self) -> None:
        """Leave the group and release the clients; after a failure, without committing anything."""
        membership, engine = self._membership, self._engine
        broken = membership is not None and membership.rebalance.broken
        try:
            if membership is not None:
                if not broken and membership.consumers and engine is not None:
                    engine.progress.send(time.monotonic(), everything=True)  # for the next owner
                membership.leave(commit=True)
        finally:
            self._gc.release()
            try:
                if membership is not None:
                    membership.close()
                if engine is not None:  # its stores, and its hold on the slot's mapped words
                    engine.close()
                self._components.close(clean=not broken)
            finally:
                self._components = Components(())
                if self._output is not None and not broken:
                    self._output.close()
                self._trace = None
                self._started.clear()

    # -- the loop ---------------------------------------------------------------------------------------

    def _settle_gc(self) -> None:
        """Long-lived state (restored, installed or being copied) out of the collector's walks; between
        fetch rounds, and between the slices of a restore inside the assignment callback."""
        following = self._following
        copied = following.follower.copied if following is not None else 0
        self._gc.settle(self.counters.restored_keys + copied)

    def step(self) -> int:
        """Fetch what fits, run queued records for up to ``run_slice``, commit when due.

        Returns how many records were fetched.
        """
        engine, membership, output = self._engine, self._membership, self._output
        if engine is None or membership is None or output is None or not membership.consumers:
            raise CadenzaError("the worker is not started")
        membership.raise_fatal()
        watch = self.loop_watch
        marks, clock = watch.marks, watch.clock  # the phases' ends (see loop_watch.PHASES)
        marks[0] = clock()
        self._settle_gc()
        marks[1] = clock()
        buffered = len(engine.scheduler) + engine.lessee_held
        pressure = output.pressure
        if pressure:
            output.serve()  # failed deliveries are reported (and then raised) only when served
        trace = self._trace
        fetch_start = time.time() if trace is not None else 0.0
        block = self._components.before_fetch() and not membership.restoring
        marks[2] = clock()
        messages = membership.fetch(buffered, pressure, block=block)
        marks[3] = clock()
        consumed = time.time() if trace is not None else 0.0
        # Ready once the group is joined and the assigned state restored (the assignment callback runs
        # inside consume), and not while no broker is reachable: the worker waits that out (the clients
        # reconnect by themselves), so liveness stays up, but nothing it does lands until then.
        joined = membership.joined
        self._joined_once = self._joined_once or joined  # a later failure is then restartable
        self.exporter.health.ready = joined and membership.brokers_up and not self._stop.is_set()
        if messages:
            self._admit(engine, membership, messages)
        if trace is not None:
            trace.fetch(messages, queued=buffered > 0, started=fetch_start, returned=consumed)
        marks[4] = clock()
        membership.restore_step()
        marks[5] = clock()
        membership.flow_control()
        marks[6] = clock()
        ran = engine.run_for(self.config.run_slice)
        if not ran and not messages and engine.lessee_held:
            engine.wait_for_lessees(LESSEE_WAIT)  # nothing else to do: a lessee's answer ends it
        marks[7] = clock()
        if engine.processors:
            ran += engine.fire_wall_clock_timers()
        now = time.monotonic()
        progress = engine.progress
        if progress.due(now):  # also asked after each quantum; this covers a round that ran none
            progress.send(now)
        marks[8] = clock()
        membership.checkpoint_step(now, worked=bool(ran or messages))
        self.counters.batches += 1
        marks[9] = clock()
        self._queued = buffered + len(messages)
        self._components.after_round()  # the loop watch last: it ends the round
        return len(messages)

    def _admit(self, engine: Engine, membership: KafkaMembership, messages: list[Message]) -> None:
        guard = self._guard
        if guard is None:
            engine.admit(messages)
            return
        if guard.suspect:
            # Records a dead worker may have been running go one by one; the worker reads nothing
            # else meanwhile, so that time is no input's silence (see idle_clock.py).
            with self.idle_clock.stalled():
                guard.admit(engine, messages, membership.fetcher.end_offset)
        else:
            engine.admit(messages)
        # the quarantine lease covers them before they run
        guard.extend((key, p.fetched) for key, p in engine.inflight.partitions.items())

    def admit(self, messages: list[Message]) -> None:
        """Decode and queue fetched records (see
        :meth:`Engine.admit <cadenza.worker.engine.engine.Engine.admit>`)."""
        self.engine.admit(messages)

    def run_for(self, seconds: float) -> int:
        """Run quanta, best priority first, until the buffer is empty, ``seconds`` have passed or the
        producer pushes back (see :mod:`.engine.executor`)."""
        return self.engine.run_for(seconds)

    def commit(self) -> None:
        """Commit everything that finished, waiting until it is durable: outputs acknowledged, then
        state changelogged, then offsets committed (a revocation, a stop; the run loop's own
        checkpoints do not wait, see :mod:`.kafka.checkpoint`)."""
        self.membership.commit()

    def _waiting(self, topic: str) -> list[int]:
        membership = self._membership
        return membership.waiting(topic) if membership is not None else []

    def _pipeline_stopped(
        self, stopped: PipelineStoppedError, schedules: Sequence[TaskSchedule], dropped: int
    ) -> None:
        if self._membership is not None:  # it holds the pipeline's input (and says so)
            self._membership.pipeline_stopped(stopped, schedules, dropped)
