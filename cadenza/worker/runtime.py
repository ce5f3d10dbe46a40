"""The worker: fetch -> decode -> schedule -> run -> produce -> commit, for every pipeline of the process.

One group reads every source and repartition topic of every pipeline, through one consumer per fetch
lane (:mod:`cadenza.worker.kafka.lanes`: topics of latency-sensitive pipelines apart from bulk ones, so an
urgent record never waits in librdkafka's queue behind bulk records fetched before it; one lane, one
consumer, when the pipelines' targets are alike), and one producer per lane writes what the lane's
pipelines write (a bulk lane's lingering longer, so that its records leave in few requests).
:meth:`Worker.start` creates the topics, assembles the plan in one pass (:mod:`cadenza.worker.engine.plan`:
tasks whose operators get their stamps and metrics when built, and their schedules) and joins the
group. Each :meth:`Worker.step`:

1. **fetch** (:mod:`cadenza.worker.kafka.fetcher`): ``consume()`` from every lane, most urgent first, as
   many records as the scheduler's buffer has room for (at most ``batch_size`` or a partition's
   share). A partition holding its fair share of the buffer is paused until it drained to half, so
   a burst is held back at the broker while other tenants' partitions keep flowing; if the buffer
   fills all the same, or the producer pushes back (its local queue above its high mark), every
   partition is paused. The fetch never waits for a batch to fill (librdkafka's batch consume would
   wait out its whole timeout for one): it takes what the client holds, and only with nothing
   queued anywhere waits up to ``poll_timeout`` for the next single record;
2. **decode and admit** (:meth:`Worker.admit`, the one place a record enters the scheduler): per
   record and per sub-topology reading its topic, a :class:`~cadenza.worker.engine.unit.Unit` (or a dead
   letter) with a scheduling context (:mod:`cadenza.worker.engine.context_stamps`), queued in its
   operator-partition (sub-topology, input partition);
3. **run** (:mod:`cadenza.worker.engine.executor`): quanta picked by the policy's priority of each
   operator-partition's head record (:class:`~cadenza.scheduling.Scheduler`), for up to
   ``run_slice`` seconds (and no new quantum while the producer pushes back), then back to fetching
   so that newly arrived urgent records are seen. Each run is timed; the measurement goes to the
   policy as a reply (so cost estimates learn at once), to the Prometheus histograms and, sampled,
   to the spans topic;
4. **produce**: operators produce asynchronously as they run;
5. **commit** (:mod:`cadenza.worker.kafka.checkpoint`), every ``commit_interval`` seconds or when the
   buffer is empty, without waiting: a checkpoint takes the committable offset of each partition
   (below it every record's units ran, despite the reordering) and the window changelog writes, and
   seals the output's epoch; later steps write the changelog once those outputs are acknowledged and
   commit the offsets once the changelog is, each partition's through the lane consumer that owns it.

So a committed offset always has every output and every state write of the records below it
acknowledged: at-least-once, with dead-lettered records committed too (their dead letter was
acknowledged).

Rebalancing (:mod:`cadenza.worker.kafka.rebalance`; cooperative-sticky, so assignments are incremental):
a newly assigned partition with window or join state is assigned paused, and its state is read
back from its changelog a slice at a time between runs of records (:mod:`cadenza.worker.kafka.restoring`);
the partition is resumed once its own state is back, while the others run on. On revocation, what
finished is committed and the queued records of the revoked partitions are dropped from the
scheduler: they are handed back, uncommitted, to the partition's next owner. Under plan ownership
(:mod:`cadenza.worker.kafka.ownership`) the same paths take and release partitions, driven by the plan
instead of the group, and a moved partition's state comes from a warm copy.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaException, Message, TopicPartition

from cadenza.analysis.kafka_trace import KafkaActivityTrace, activities_topic_spec
from cadenza.errors import CadenzaError, ConfigError
from cadenza.feedback.consumer import FeedbackConsumer
from cadenza.infra.kafka.clients import (
    DEFAULT_ASSIGNOR,
    ClientErrors,
    make_admin,
    make_consumer,
)
from cadenza.infra.kafka.errors import BrokerUnavailableError, from_kafka_exception
from cadenza.infra.kafka.topics import TopicSpec, ensure_topics
from cadenza.infra.metrics import names
from cadenza.infra.metrics.emitter import SpanEmitter
from cadenza.infra.metrics.prometheus import PrometheusExporter
from cadenza.infra.metrics.topics import metrics_topic_specs
from cadenza.pipelines import Pipeline, PipelineGraph
from cadenza.scaling.ownership import OwnershipLog, ownership_topic_spec
from cadenza.scheduling.clock import Clock
from cadenza.scheduling.costs import CostModel
from cadenza.scheduling.policy import SchedulingPolicy
from cadenza.scheduling.registry import resolve_policy
from cadenza.scheduling.scheduler import Scheduler
from cadenza.settings import KafkaSettings
from cadenza.state import ChangelogReplay
from cadenza.state.factory import StoreFactory, store_factory
from cadenza.worker.config import WorkerConfig
from cadenza.worker.engine.context_stamps import TaskSchedule
from cadenza.worker.engine.counters import WorkerCounters
from cadenza.worker.engine.dead_letter import PipelineStoppedError
from cadenza.worker.engine.decode import make_registry_client
from cadenza.worker.engine.engine import Engine, EngineTransport, RunHooks
from cadenza.worker.engine.executor import Executor, SchedKey
from cadenza.worker.engine.idle_clock import READ_GAP, IdleClock
from cadenza.worker.engine.operators.progress import FrontierTap
from cadenza.worker.engine.operators.stateful import StatefulStep
from cadenza.worker.engine.output import Output
from cadenza.worker.engine.plan import WorkerPlan, assemble
from cadenza.worker.engine.topics import plan_topics, written_topics
from cadenza.worker.engine.topology import SubTopology, check_copartitioned, join_inputs, split
from cadenza.worker.engine.unit import Unit
from cadenza.worker.kafka.checkpoint import Checkpoint
from cadenza.worker.kafka.fetcher import Fetcher, FlowControl
from cadenza.worker.kafka.group_plan import GroupPlan, check_group_plan, groups_topic_spec
from cadenza.worker.kafka.lanes import (
    Lane,
    ProduceLane,
    joint_targets,
    plan_lanes,
    plan_produce_lanes,
    topic_targets,
)
from cadenza.worker.kafka.ownership import PlanFollower, warm_read_budget
from cadenza.worker.kafka.rebalance import Rebalance
from cadenza.worker.kafka.restoring import StateRestorer
from cadenza.worker.reliability.crash_slot import CrashSlot, default_crash_dir
from cadenza.worker.reliability.loop_watch import LoopWatch
from cadenza.worker.reliability.quarantine import QuarantineGuard
from cadenza.worker.reliability.quarantine_marks import quarantine_topic_spec
from cadenza.worker.tuning.gc_tuning import GcTuning
from cadenza.worker.tuning.hop_estimates import DEFAULT_HOP_QUANTILE, HopEstimates, check_hop_quantile
from cadenza.worker.tuning.rates import RatesPublisher, track_true_rates

__all__ = ["Worker", "default_group", "make_policy"]

_INF = math.inf


_log = logging.getLogger("cadenza.worker")

#: A key_by's heartbeats for input partitions whose records wait in the worker go out every this
#: share of the idle timeout (at least every ``progress_interval``): a window downstream hears of
#: them several times before it would time them out.
HEARTBEAT_SHARE = 0.25


def make_policy(policy: str | SchedulingPolicy, graphs: Sequence[PipelineGraph]) -> SchedulingPolicy:
    """The policy object for a name or import path, given its pipelines' tenant weights; a policy
    object as it is (both checked against the contract, see :func:`resolve_policy`)."""
    return resolve_policy(policy, {g.tenant: g.tenant_weight for g in graphs})


def default_group(graphs: Sequence[PipelineGraph]) -> str:
    """The consumer group a worker joins when none is given: ``cadenza-`` and its pipelines' names.

    Workers in one group split its topics' partitions; a worker running other pipelines in the same
    group takes partitions whose records its own pipelines never see, and commits them: they are
    gone. Deriving the group from the pipelines makes that impossible by accident (two modules
    started with the default group get two groups). Long name lists are shortened to a digest.
    """
    names = sorted(graph.name for graph in graphs)
    joined = "+".join(names)
    if len(joined) <= 200:
        return f"cadenza-{joined}"
    return f"cadenza-{hashlib.sha256(joined.encode()).hexdigest()[:32]}"


class Worker:
    """Runs pipelines until :meth:`stop`. Use :meth:`run` in the thread that owns the worker.

    ``pipelines`` are :class:`~cadenza.pipelines.Pipeline` objects (compiled here) or compiled graphs.
    Construction checks them (an unsupported step raises, naming the pipeline and step); :meth:`start`
    creates missing topics and joins the group; :meth:`run` starts if needed and loops.

    Scheduling: ``policy`` is a built-in name (``fifo``, ``edf``, ``cameo``, ``sjf``, ``fair``), a
    ``package.module:Class`` import path or a policy object. ``quantum_records`` and
    ``quantum_seconds`` bound the records one operator-partition runs before priorities are looked
    at again (non-preemptive); ``run_slice`` is how long the worker runs queued records before it
    fetches again; ``max_buffered`` bounds the records held (see the module docstring);
    ``commit_interval`` is the most seconds between commits while the buffer is busy.
    ``clock`` is the scheduler's clock (wall-clock seconds; tests inject a virtual one).

    Observability: ``exporter`` receives per-operator counters and histograms (one is made if not
    given); with ``spans_topic`` a sampled share (``span_sample_ratio``) of executions is sent there as
    Avro spans; with ``feedback_topic`` cost statistics from the stats job refine the estimates, and
    the worker publishes its true rates there every rate window (:class:`.rates.RatesPublisher`).
    ``watermark_idle_timeout``: seconds after which an input that delivers nothing stops holding a
    window's watermark back (``None``: never; windows then wait for every input); each firing is
    counted in ``cadenza_watermark_idle_timeouts_total`` and logged once per input (see
    ``docs/concepts/watermarks.md``). ``progress_interval``: the most seconds between progress records a
    key_by sends to every partition of its repartition topic, for the watermarks downstream.
    ``hop_quantile``: the quantile of each repartition hop's recent latency that the path costs of
    the operators upstream of it count (:mod:`cadenza.worker.tuning.hop_estimates`); 0 leaves hops out.
    ``activities_topic``: where the worker sends its activity trace (per interval: fetch, quantum,
    commit) for ``cadenza analyze`` (:mod:`cadenza.analysis`); ``None`` records nothing.
    ``replace_plan``: take over the group even if it runs other pipelines and still has live members
    (a worker of another plan is otherwise refused: :mod:`cadenza.worker.kafka.group_plan`).
    ``max_poll_interval``: seconds a user call may run before the group declares this worker's
    partitions lost (``max.poll.interval.ms``); ``hang_timeout`` (default: 80 % of it): seconds after
    which the watchdog pins a running call as a possible poison pill (:mod:`.quarantine`).
    ``crash_dir``: where the worker keeps its crash slot, which names the record running should the
    process die (:mod:`.crash_slot`); default ``<state_dir>/crash``, else under the temp directory.
    ``state_store``: ``memory``, ``rocksdb`` (under ``state_dir``), a store factory (step name ->
    :class:`~cadenza.state.StateStore`) or its ``package.module:factory`` path; either way the changelog
    topics are the state's durable copy, and a partition's state is rebuilt from them when it is assigned.
    Each sub-topology's true and observed rates (for scaling) are exported over windows of
    ``rate_window_s`` (None: ``CADENZA_RATE_WINDOW_S`` or 10 s; see :mod:`cadenza.worker.tuning.rates`).
    ``lanes``: how topics are split into fetch lanes, one consumer each (``auto``: by the tightest
    latency target of the pipelines reading them; ``off``: one consumer; or ascending bounds in ms,
    ``500,10000``; see :mod:`cadenza.worker.kafka.lanes`). ``fetch_wait``: the most urgent lane's broker wait
    for records, in seconds (librdkafka's ``fetch.wait.max.ms``), and the least any lane waits: the
    lanes behind it wait a share of their own target (:func:`cadenza.worker.kafka.lanes.patient_fetch`).
    ``gc_young_threshold``: while the worker is started, the cyclic garbage collector's young-generation
    threshold (the interpreter's default is 700) and what was alive at the start frozen out of its walks,
    so buffered records are not walked again and again; 0 leaves the collector alone (:mod:`.gc_tuning`).
    ``ownership``: ``group`` (the consumer group's rebalances give the partitions) or ``plan`` (the
    ownership plan of a pool controller does, and partitions move warm and one at a time, see
    :mod:`.ownership`; ``worker_id`` names the worker in the plan and must then be stable).
    ``stall_threshold``: seconds of one round of the loop (less a fetch that waited for records) past
    which it is a stall, counted by phase in ``cadenza_worker_stalls_total`` and logged
    (:mod:`.loop_watch`).
    ``config``: a :class:`~cadenza.worker.config.WorkerConfig` giving every setting it declares (the
    keyword arguments it covers must then be left out).
    """

    rate_window_s: float | None = None

    def __init__(
        self,
        pipelines: Sequence[Pipeline | PipelineGraph],
        settings: KafkaSettings,
        *,
        group: str | None = None,
        partitions: int = 4,
        batch_size: int = 1000,
        poll_timeout: float = 0.1,
        restore_timeout: float = 60.0,
        restore_slice: float = 0.01,
        watermark_idle_timeout: float | None = 30.0,
        consumer_overrides: dict[str, Any] | None = None,
        policy: str | SchedulingPolicy = "cameo",
        clock: Clock | None = None,
        quantum_records: int | None = 16,
        quantum_seconds: float | None = 0.002,
        run_slice: float = 0.01,
        max_buffered: int = 10_000,
        commit_interval: float = 0.2,
        progress_interval: float = 0.05,
        hop_quantile: float = DEFAULT_HOP_QUANTILE,
        exporter: PrometheusExporter | None = None,
        spans_topic: str | None = None,
        span_sample_ratio: float = 0.01,
        feedback_topic: str | None = None,
        worker_id: str | None = None,
        state_store: str | StoreFactory = "memory",
        state_dir: str | Path | None = None,
        activities_topic: str | None = None,
        replace_plan: bool = False,
        max_poll_interval: float = 300.0,
        hang_timeout: float | None = None,
        lanes: str = "auto",
        fetch_wait: float = 0.02,
        crash_dir: str | Path | None = None,
        gc_young_threshold: int = 10_000,
        ownership: str = "group",
        stall_threshold: float = 0.1,
        config: WorkerConfig | None = None,
    ) -> None:
        if config is not None:
            # The settings the config declares replace the keyword arguments (given both ways: an error).
            given = {
                k: v for k, v in locals().items() if k not in ("self", "pipelines", "settings", "config")
            }
            Worker.__init__(self, pipelines, settings, **{**given, **config.worker_arguments(given)})
            return
        if not pipelines:
            raise CadenzaError("the worker has no pipeline to run")
        if partitions < 1 or batch_size < 1:
            raise CadenzaError("partitions and batch_size must be at least 1")
        if max_buffered < 1:
            raise ConfigError(f"max_buffered must be at least 1, got {max_buffered!r}")
        if not (0.0 < run_slice < 60.0) or not (0.0 < commit_interval < 3600.0):
            raise ConfigError(
                f"run_slice must be in (0, 60) s and commit_interval in (0, 3600) s, got {run_slice!r} "
                f"and {commit_interval!r}"
            )
        if not (0.0 < progress_interval < 60.0):
            raise ConfigError(f"progress_interval must be in (0, 60) s, got {progress_interval!r}")
        check_hop_quantile(hop_quantile)
        if not (0.001 <= fetch_wait <= 10.0):
            raise ConfigError(f"fetch_wait must be between 0.001 and 10 s, got {fetch_wait!r}")
        if hang_timeout is None:
            hang_timeout = 0.8 * max_poll_interval
        if (
            not (0.0 < hang_timeout < max_poll_interval)
            or max_poll_interval * 1000 < settings.session_timeout_ms
        ):
            raise ConfigError(
                f"hang_timeout ({hang_timeout!r} s) must be above 0 and below max_poll_interval "
                f"({max_poll_interval!r} s), which must be at least the session timeout "
                f"({settings.session_timeout_ms} ms)"
            )
        if not (0.0 < span_sample_ratio <= 1.0):
            raise ConfigError(f"span_sample_ratio must be in (0, 1], got {span_sample_ratio!r}")
        if gc_young_threshold < 0:
            raise ConfigError(f"gc_young_threshold must be at least 0, got {gc_young_threshold!r}")
        if ownership not in ("group", "plan"):
            raise ConfigError(f"ownership must be 'group' or 'plan', got {ownership!r}")
        if not (0.0 < stall_threshold < 3600.0):
            raise ConfigError(f"stall_threshold must be in (0, 3600) s, got {stall_threshold!r}")
        graphs = [p.compile() if isinstance(p, Pipeline) else p for p in pipelines]
        if ownership == "plan" and any(node.kind == "join" for graph in graphs for node in graph.nodes):
            # A join's state partition p is fed by partition p of both inputs; the plan moves input
            # partitions one at a time, so for a while two workers would write that state.
            raise ConfigError("ownership 'plan' does not run joins yet; use ownership 'group'")
        names_ = [g.name for g in graphs]
        duplicates = sorted({n for n in names_ if names_.count(n) > 1})
        if duplicates:
            raise CadenzaError(f"pipelines {duplicates} are declared more than once; names must be unique")
        self.settings = settings
        #: Derived from the pipelines unless given, so that workers of other pipelines never share it.
        self.group = group if group is not None else default_group(graphs)
        self.default_partitions = partitions
        #: Replace the group's recorded plan even while it has live members (see :mod:`.plans`).
        self.replace_plan = replace_plan
        self.max_poll_interval = max_poll_interval
        self.hang_timeout = hang_timeout
        self.crash_dir = Path(crash_dir) if crash_dir is not None else default_crash_dir(state_dir)
        #: This process's crash slot while started (:mod:`.crash_slot`); ``None`` if none could be had.
        self._slot: CrashSlot | None = None
        #: The collector's settings while started (:mod:`.gc_tuning`).
        self._gc = GcTuning(gc_young_threshold)
        #: Rounds of the loop that kept queued records waiting ``stall_threshold`` s (:mod:`.loop_watch`).
        self.loop_watch = LoopWatch(stall_threshold)
        self.batch_size = batch_size
        self.poll_timeout = poll_timeout
        self.restore_timeout = restore_timeout
        if not 0.0 <= restore_slice < 60.0:
            raise ConfigError(f"restore_slice must be at least 0 and below 60 s, got {restore_slice!r}")
        self.watermark_idle_timeout = watermark_idle_timeout
        self.max_buffered = max_buffered
        self.run_slice = run_slice
        self.commit_interval = commit_interval
        self.progress_interval = progress_interval
        self.hop_quantile = hop_quantile
        #: The repartition hops start deadlines count (see :mod:`.hop_estimates`); made at the start.
        self._hops: HopEstimates | None = None
        self._consumer_overrides = dict(consumer_overrides or {})
        self._store_factory = store_factory(state_store, state_dir)
        self.state_store = state_store
        self.graphs = graphs
        self.subtopologies: list[tuple[PipelineGraph, list[SubTopology]]] = [(g, split(g)) for g in graphs]
        self.policy = make_policy(policy, graphs)
        readers = [(sub.input_topic, g.latency_target_s) for g, subs in self.subtopologies for sub in subs]
        joined = [topics for g, subs in self.subtopologies for topics in join_inputs(g, subs).values()]
        targets = joint_targets(topic_targets(readers), joined)
        #: The fetch lanes, most urgent first (one: a single consumer, as without lanes).
        self.lanes: list[Lane] = plan_lanes(targets, lanes, fetch_wait)
        writers = [
            (topic, g.latency_target_s) for g, subs in self.subtopologies for topic in written_topics(g, subs)
        ]
        #: The producers, most urgent first: one per fetch lane that has topics to write.
        self.produce_lanes: list[ProduceLane] = plan_produce_lanes(writers, self.lanes, settings.linger_ms)
        self.scheduler: Scheduler[SchedKey, Unit] = Scheduler(
            self.policy, clock=clock, max_records=quantum_records, max_seconds=quantum_seconds
        )
        #: What process steps' wall-clock timers are measured on: the injected clock, else epoch time.
        self._wall_clock = clock.now if clock is not None else time.time
        #: What window and join steps measure their inputs' idle timeouts on.
        self.idle_clock = IdleClock(read_gap=READ_GAP)
        self.exporter = exporter if exporter is not None else PrometheusExporter()
        self.spans_topic = spans_topic
        self.span_sample_ratio = span_sample_ratio
        self.feedback_topic = feedback_topic
        self.worker_id = worker_id or f"{socket.gethostname()}-{os.getpid()}"
        #: ``group``: partitions come from the consumer group's rebalances; ``plan``: from the
        #: ownership plan, moved warm and one at a time (:mod:`.ownership`).
        self.ownership = ownership
        self._follower: PlanFollower | None = None
        #: Partitions whose state a plan move installed from a warm copy: not restored again.
        self._installed: set[tuple[str, int]] = set()
        self.emitter: SpanEmitter | None = None
        self.feedback: FeedbackConsumer | None = None
        #: Publishes each rate window to the feedback topic (``None``: no feedback topic, or not started).
        self.rates_publisher: RatesPublisher | None = None
        self.activities_topic = activities_topic
        self.trace: KafkaActivityTrace | None = None
        #: The trace recorder's ``record``, or ``None``: one test per interval on the hot loop.
        self._record: Callable[[str, float, float, str | None], None] | None = None
        self.counters = WorkerCounters()
        self.topics: list[TopicSpec] = []
        self._stop = threading.Event()
        self._started = False
        self._output: Output | None = None
        self._guard: QuarantineGuard | None = None
        #: One consumer per lane, in :attr:`lanes`' order, with its error handler (empty until started).
        self._consumers: list[tuple[Consumer, ClientErrors]] = []
        self._fetcher: Fetcher | None = None
        self._restorer = StateRestorer(
            settings,
            self.group,
            self.counters,
            restore_timeout,
            background=restore_slice > 0,
            idle_clock=self.idle_clock,
            settle=self._settle_gc,
        )
        self.restore_slice = restore_slice
        #: What the started worker runs (see :mod:`cadenza.worker.engine.plan`); ``None`` until :meth:`start`.
        self.plan: WorkerPlan | None = None
        #: Runs the records (:mod:`cadenza.worker.engine.engine`); built complete by :meth:`start`.
        self._engine: Engine | None = None
        #: Outputs, state and offsets made durable in that order; built by :meth:`start`.
        self._checkpoint: Checkpoint | None = None
        #: Pause and resume decisions (the fetcher applies them to the consumer once started).
        self._flow = FlowControl(max_buffered, lanes=len(self.lanes), shares=len(set(targets.values())) > 1)
        #: Assign, revoke and lost: the one place the group's decisions are handled.
        self._rebalance = Rebalance(
            self._restore,
            self._commit_on_revoke,
            self._forget,
            assigned=self._guard_assigned,
            released=self._guard_released,
            lost=self._guard_lost,
            members=len(self.lanes),
        )

    # -- what it runs ---------------------------------------------------------------------------------

    @property
    def input_topics(self) -> list[str]:
        return list(dict.fromkeys(s.input_topic for _, subs in self.subtopologies for s in subs))

    def describe(self) -> str:
        """A human summary: pipelines, tenants, sub-topologies and topics."""
        lines = [f"group {self.group}: {len(self.graphs)} pipeline(s), policy {self.policy.name}"]
        for graph, subs in self.subtopologies:
            lines.append(
                f"  pipeline {graph.name} (tenant {graph.tenant}, weight {graph.tenant_weight:g}, "
                f"latency target {graph.latency_target_s:g}s)"
            )
            for sub in subs:
                writes = ", ".join([*sub.repartition_topics, *sub.sink_topics]) or "-"
                steps = " -> ".join(n for n in sub.nodes if n != sub.entry)
                lines.append(f"    reads {sub.input_topic} ({sub.input_kind}) -> {steps} -> writes {writes}")
            lines.append(f"    dead letters -> {graph.dead_letter_topic}; late records -> {graph.late_topic}")
        return "\n".join(lines)

    @property
    def assignment(self) -> set[tuple[str, int]]:
        return self._rebalance.assignment

    def wait_assigned(self, timeout: float) -> bool:
        """Block until the group gave this worker partitions (and their state is restored)."""
        until = time.monotonic() + timeout
        return self._rebalance.wait_assigned(timeout) and self._restorer.settled.wait(
            max(0.0, until - time.monotonic())
        )

    @property
    def joined(self) -> bool:
        """Whether the worker has joined its group at least once and restored what it was given."""
        return self._rebalance.joined and not self._restorer.restoring

    @property
    def buffered(self) -> int:
        """Units queued in the scheduler (what ``max_buffered`` bounds)."""
        return len(self.scheduler)

    @property
    def cost_model(self) -> CostModel | None:
        """The policy's cost model, if it keeps one (every built-in does)."""
        return self.policy.cost_model

    # -- life cycle -------------------------------------------------------------------------------------

    def start(self) -> None:
        """Create missing topics, build the operators, join the group. Called by :meth:`run` if needed."""
        if self._started:
            return
        admin = make_admin(self.settings)
        timeout = self.settings.request_timeout_ms / 1000.0
        try:
            metadata = admin.list_topics(timeout=timeout)
        except KafkaException as exc:
            # The first call to the cluster: when no broker answers, the address is the likely cause.
            error = from_kafka_exception(
                exc, f"listing topics at {self.settings.bootstrap_servers} (CADENZA_BOOTSTRAP_SERVERS)"
            )
            if isinstance(error, BrokerUnavailableError):
                error = BrokerUnavailableError(
                    f"{error} (no answer within {timeout:.0f} s); check that a broker listens at that "
                    "address, or set CADENZA_BOOTSTRAP_SERVERS to one (`cadenza broker --detach` starts "
                    "a local one)",
                    code=error.code,
                    retriable=error.retriable,
                )
            raise error from None
        existing = {
            name: len(topic.partitions)
            for name, topic in metadata.topics.items()
            if topic.error is None and topic.partitions
        }
        self.topics = plan_topics(self.subtopologies, existing, self.default_partitions)
        counts = {spec.name: spec.partitions for spec in self.topics}
        for graph, subs in self.subtopologies:
            check_copartitioned(graph, subs, counts)
        metrics_topics = [
            spec
            for spec in metrics_topic_specs(
                self.spans_topic or "cadenza-spans", self.feedback_topic or "cadenza-feedback"
            )
            if spec.name in (self.spans_topic, self.feedback_topic)
        ]
        if self.activities_topic is not None:
            metrics_topics.append(activities_topic_spec(self.activities_topic))
        control = [groups_topic_spec(), quarantine_topic_spec()]
        if self.ownership == "plan":
            control.append(ownership_topic_spec())
        created = ensure_topics(admin, [*self.topics, *metrics_topics, *control], timeout=timeout)
        if created:
            _log.info("created topics: %s", ", ".join(sorted(created)))
        # Before the subscription, so a worker of another plan is refused before it commits anything.
        group_plan = GroupPlan.of(self.graphs, self.worker_id)
        check_group_plan(
            self.settings, admin, self.group, group_plan, replace=self.replace_plan, timeout=timeout
        )
        # Statistics each second: the requests it sends (cadenza_kafka_requests_total).
        self._output = Output.for_lanes(self.settings, self.produce_lanes, **{"statistics.interval.ms": 1000})
        if self.spans_topic is not None:
            self.emitter = SpanEmitter.to_kafka(
                self.settings, self.spans_topic, worker_id=self.worker_id, sample_ratio=self.span_sample_ratio
            )
            self.emitter.start()
            self.exporter.track_span_emitter(self.emitter)
        if self.feedback_topic is not None:
            self.feedback = FeedbackConsumer(self.settings, self.feedback_topic)
            self.feedback.start(timeout)
            self.exporter.track_feedback(self.feedback)
        if self.activities_topic is not None:
            self.trace = KafkaActivityTrace(self.settings, self.activities_topic, self.worker_id)
            self._record = self.trace.recorder.record
            self._output.trace_header = self.trace.header
        # The marks' owner is this worker object, not only its process: a worker restarted in place
        # must not be taken for the one that died.
        owner = f"{self.worker_id}#{uuid.uuid4().hex[:6]}"
        self._guard = guard = QuarantineGuard(
            self.settings,
            self.group,
            owner,
            hang_timeout=self.hang_timeout,
            poll_interval=self.max_poll_interval,
            timeout=timeout,
        )
        # Before the join: what a dead worker's crash slot on this host says becomes exact marks.
        hooks = RunHooks(emitter=self.emitter, record=self._record)
        self._slot = slot = CrashSlot.take(self.crash_dir, self.group, owner)
        if slot is not None:
            guard.recover(slot.dead)
            if slot.settle():
                guard.slot = slot
                hooks = RunHooks(emitter=self.emitter, record=self._record, words=slot.words, tags=slot.tags)
            else:
                self._slot = None
        self.exporter.register_callback(
            names.RECORDS_QUARANTINED, lambda: {(t,): n for t, n in guard.quarantined.items()}
        )
        plan = self.plan = assemble(
            self.subtopologies,
            output=self._output,
            counters=self.counters,
            policy=self.policy,
            exporter=self.exporter,
            emitter=self.emitter,
            partitions=counts,
            idle_timeout=self.watermark_idle_timeout,
            store_factory=self._store_factory,
            registry_client=make_registry_client(self.settings),
            clock=self.idle_clock.now,
            wall_clock=self._wall_clock,
        )
        self._engine = engine = Engine(
            plan,
            self.scheduler,
            EngineTransport(self._output, waiting=self._waiting, stopped=self._pipeline_stopped),
            counters=self.counters,
            read_clock=self.idle_clock,
            progress_interval=self.progress_interval,
            idle_timeout=self.watermark_idle_timeout,
            hooks=hooks,
        )
        # A trickle of records runs the buffer dry after each one: commit then at most every poll.
        self._checkpoint = Checkpoint(
            self.counters,
            self.commit_interval,
            inflight=engine.inflight,
            output=self._output,
            windows=plan.windows,
            dry_interval=self.poll_timeout,
            record=self._record,
        )
        model = self.cost_model
        readers = [s for s in plan.schedules if not s.from_source]
        if model is not None and self.hop_quantile > 0.0 and readers:
            hops = [(s.pipeline, s.operator_id, s.arrival) for s in readers]
            self._hops = HopEstimates(model, hops, self._wall_clock, quantile=self.hop_quantile)
            labels = [(s.tenant, s.pipeline, s.operator_id) for s in readers]
            self.exporter.register_callback(
                names.PLANNED_HOP, lambda: {(t, p, o): model.hop(p, o) for t, p, o in labels}
            )
        self._flow.fanout = plan.fanout
        stateful: dict[tuple[str, str, str], StatefulStep | FrontierTap] = {
            (schedule.tenant, schedule.pipeline, window.node_id): window
            for schedule in plan.schedules
            for window in schedule.task.windows
        }
        for schedule in plan.schedules:  # a key_by's frontier times out inputs like a window
            frontier = schedule.task.frontier
            if frontier is not None:
                stateful[(schedule.tenant, schedule.pipeline, frontier.node_id)] = frontier
        self.exporter.register_callback(
            names.WATERMARK_IDLE_TIMEOUTS, lambda: {labels: w.idle_timeouts for labels, w in stateful.items()}
        )
        self.exporter.register_callback(names.BUFFERED_RECORDS, lambda: len(self.scheduler))
        self.exporter.register_callback(names.WORKER_STALLS, self.loop_watch.counts)
        self.exporter.register_callback(names.WORKER_STALL_SECONDS, self.loop_watch.stalled_seconds)
        self.exporter.register_callback(names.PAUSED_PARTITIONS, lambda: len(self._flow.paused))
        self.rates = track_true_rates(self.exporter, plan.schedules, window_s=self.rate_window_s)
        if self.feedback_topic is not None:
            self.rates_publisher = RatesPublisher(
                self.rates, self.worker_id, self._output.producer, self.feedback_topic
            )
        tenants = {graph.name: graph.tenant for graph in self.graphs}
        targets: dict[tuple[str, ...], float | int] = {
            (g.tenant, g.name): g.latency_target_s for g in self.graphs
        }
        self.exporter.register_callback(names.LATENCY_TARGET, lambda: targets)
        self.exporter.register_callback(names.PARTITION_BUFFERED_RECORDS, self._partition_buffers)
        self.exporter.register_callback(
            names.PIPELINE_STOPPED,
            lambda: {(tenants[name], name): 1 if name in self.stopped else 0 for name in tenants},
        )
        overrides: dict[str, Any] = {
            # Statistics each second tell when a broker is reachable again after an outage (see
            # ClientErrors.statistics): that drives cadenza_broker_reachable and /readyz.
            "statistics.interval.ms": 1000,
        }
        if any(node.kind == "join" for graph in self.graphs for node in graph.nodes):
            # A join needs partition p of both its inputs on one worker; the range assignor gives that
            # for co-partitioned topics, cooperative-sticky does not.
            overrides["partition.assignment.strategy"] = "range"
        overrides["max.poll.interval.ms"] = round(self.max_poll_interval * 1000)
        # Each lane's prefetch bounds (see cadenza.worker.kafka.lanes), then what the caller overrides.
        given = self._consumer_overrides
        assignor = str({**overrides, **given}.get("partition.assignment.strategy", DEFAULT_ASSIGNOR))
        self._rebalance.eager = "cooperative" not in assignor
        self._consumers = [
            make_consumer(self.settings, self.group, **{**overrides, **lane.fetch, **given})
            for lane in self.lanes
        ]
        consumers = list(self._consumers)
        producers = list(self._output.lane_errors)
        self.exporter.register_callback(
            names.BROKER_REACHABLE, lambda: int(all(errors.brokers_up for _, errors in consumers))
        )
        self.exporter.register_callback(
            names.CONSUMER_LAG,
            lambda: {
                (t, str(p)): n
                for _, errors in consumers
                for (t, p), n in errors.consumer_lag.items()
                if (t, p) in self.assignment
            },
        )

        def client_errors() -> dict[tuple[str, ...], float | int]:
            totals: dict[tuple[str, ...], float | int] = {}
            for errors in (*(errors for _, errors in consumers), *(errors for _, errors in producers)):
                for name, count in dict(errors.counts).items():
                    totals[(errors.role, name)] = totals.get((errors.role, name), 0) + count
            return totals

        self.exporter.register_callback(names.KAFKA_CLIENT_ERRORS, client_errors)
        clients = [
            *((lane.name, errors) for lane, (_, errors) in zip(self.lanes, consumers, strict=True)),
            *producers,
        ]
        self.exporter.register_callback(
            names.KAFKA_REQUESTS,
            lambda: {(client, kind): n for client, errors in clients for kind, n in errors.requests.items()},
        )
        self._fetcher = Fetcher(
            [(consumer, lane.topics) for (consumer, _), lane in zip(consumers, self.lanes, strict=True)],
            self._flow,
            self.counters,
            batch_size=self.batch_size,
            poll_timeout=self.poll_timeout,
            assignment_changes=lambda: self._rebalance.changes,
        )
        rebalance = self._rebalance
        for (consumer, _), lane in zip(consumers, self.lanes, strict=True):
            # Disjoint subscriptions in the one group: each partition has one owner, one lane.
            topics = [topic for topic in plan.routes if topic in lane.topics]
            if topics and self.ownership == "group":
                consumer.subscribe(
                    topics,
                    on_assign=rebalance.on_assign,
                    on_revoke=rebalance.on_revoke,
                    on_lost=rebalance.on_lost,
                )
            else:  # a lane of a stopped layout, or plan ownership: it never joins the group, so it must
                rebalance.on_assign(consumer, [])  # not hold /readyz back
        if self.ownership == "plan":
            self._follower = PlanFollower(
                OwnershipLog(self.settings, self.group, timeout=timeout),
                self.worker_id,
                _PlanHands(self),
                self.settings,
                read_slice=self.restore_slice or 0.01,
            )
            self._follower.start()
        self._started = True
        self._checkpoint.last = time.monotonic()
        self._gc.acquire()  # the plan and clients are built: they leave the collector's walks
        _log.info(
            "worker started in group %s with policy %s, reading %s",
            self.group,
            self.policy.name,
            "; ".join(
                f"{lane.name} (target {lane.target:g}s): {', '.join(lane.topics)}" for lane in self.lanes
            )
            if len(self.lanes) > 1
            else ", ".join(plan.routes),
        )
        if len(self.produce_lanes) > 1:
            _log.info(
                "producers: %s",
                "; ".join(
                    f"{lane.name} (linger {lane.linger_ms} ms): {', '.join(lane.topics)}"
                    for lane in self.produce_lanes
                ),
            )

    def _hung(self, failure: BaseException) -> None:
        # From the watchdog: a user call ran past max.poll.interval.ms; raised after it returns.
        self._rebalance.failure = failure
        self.exporter.health.live = False

    def stop(self) -> None:
        """Ask the worker to stop after the step in flight; safe from any thread or signal handler."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def run(self) -> None:
        """Process until :meth:`stop`, then commit what finished and leave the group.

        Records still queued at the stop are handed back uncommitted (their partitions' next owner runs
        them). Exceptions propagate, uncommitted.
        """
        try:
            self.start()  # subscribes; ready only once the group join and restore are done (step)
            if self._guard is not None:  # the hang watchdog reads this thread's quantum loop
                self._guard.watch(threading.get_ident(), Executor.run_quantum.__code__, self._hung)
            while not self._stop.is_set():
                self.step()
        except BaseException as exc:
            # Whatever ends the worker (a signal's KeyboardInterrupt included) is said at ERROR level:
            # a worker must never vanish without a line saying why.
            _log.error("the worker stops, uncommitted: %s: %s", type(exc).__name__, exc)
            self._rebalance.broken = True
            self.exporter.health.live = False
            raise
        finally:
            self.exporter.health.ready = False
            self.close()

    def abandon(self) -> None:
        """Leave the group now, committing nothing: for a stop that cannot wait for the step in flight
        (a user function that hangs). Called from another thread, so only right before the process
        exits: the records in flight stay uncommitted and the group's next owner runs them."""
        self._rebalance.broken = True
        consumers, self._consumers = self._consumers, []
        for consumer, _ in consumers:
            consumer.close()

    def close(self) -> None:
        """Leave the group and release the clients; after a failure, without committing anything."""
        consumers, self._consumers = self._consumers, []
        try:
            if consumers:
                if not self._rebalance.broken:
                    if self._engine is not None:  # for the next owner
                        self._engine.progress.send(time.monotonic(), everything=True)
                    self.commit()
                for consumer, _ in consumers:
                    consumer.close()  # the revoke callback drops what is still queued
        finally:
            self._gc.release()
            self._restorer.close()
            if self._follower is not None:
                self._follower.close()
                self._follower = None
            if self._guard is not None:
                self._guard.close()
                self._guard = None
            if self._engine is not None:  # its stores, and its hold on the slot's mapped words
                self._engine.close()
            if self._slot is not None:  # kept for the next worker unless this one stops cleanly
                self._slot.close(clean=not self._rebalance.broken)
                self._slot = None
            if self._output is not None and not self._rebalance.broken:
                self._output.close()
            if self.emitter is not None:
                self.emitter.close()
            if self.feedback is not None:
                self.feedback.close()
            if self.trace is not None:
                self.trace.close()
                self.trace = self._record = None
            self._started = False

    # -- the stages -------------------------------------------------------------------------------------

    def _settle_gc(self) -> None:
        """Long-lived state (restored, installed or being copied) out of the collector's walks; between
        fetch rounds, and between the slices of a restore inside the assignment callback."""
        follower = self._follower
        self._gc.settle(self.counters.restored_keys + (follower.copied if follower is not None else 0))

    def step(self) -> int:
        """Fetch what fits, run queued records for up to ``run_slice``, commit when due.

        Returns how many records were fetched.
        """
        fetcher, consumers, output = self._fetcher, self._consumers, self._output
        engine, checkpoint = self._engine, self._checkpoint
        if not consumers or fetcher is None or output is None or engine is None or checkpoint is None:
            raise CadenzaError("the worker is not started")
        for _, errors in consumers:
            errors.raise_fatal()
        watch = self.loop_watch
        marks, clock = watch.marks, watch.clock  # the phases' ends (see loop_watch.PHASES)
        marks[0] = clock()
        follower = self._follower
        self._settle_gc()
        marks[1] = clock()
        scheduler = self.scheduler
        buffered = len(scheduler)
        pressure = output.pressure
        if pressure:
            output.serve()  # failed deliveries are reported (and then raised) only when served
        trace = self.trace
        fetch_start = time.time() if trace is not None else 0.0
        restorer = self._restorer
        if follower is not None:
            budget = 0.0
            if follower.warming:  # the copies wait for the queued records' slack (warm_read_budget)
                budget = warm_read_budget(
                    scheduler.earliest_start_deadline(), scheduler.clock.now(), follower.read_slice
                )
            follower.step(budget=budget)
        idle_clock = self.idle_clock
        block = not restorer.restoring and (follower is None or not follower.warming)
        marks[2] = clock()
        idle_clock.fetch_started()
        messages = fetcher.fetch(buffered, pressure, block=block)
        idle_clock.fetch_ended()
        marks[3] = clock()
        consumed = time.time() if trace is not None else 0.0
        rebalance = self._rebalance
        rebalance.raise_failure()
        # Ready once the group is joined and the assigned state restored (the assignment callback runs
        # inside consume), and not while no broker is reachable: the worker waits that out (the clients
        # reconnect by themselves), so liveness stays up, but nothing it does lands until then.
        brokers_up = all(errors.brokers_up for _, errors in consumers)
        self.exporter.health.ready = self.joined and brokers_up and not self._stop.is_set()
        if messages:
            guard = self._guard
            if guard is not None and guard.suspect:
                # Records a dead worker may have been running go one by one; the worker reads nothing
                # else meanwhile, so that time is no input's silence (see idle_clock.py).
                with self.idle_clock.stalled():
                    guard.admit(engine, messages, fetcher.end_offset)
            else:
                engine.admit(messages)
            if guard is not None:  # the quarantine lease covers them before they run
                guard.extend((key, p.fetched) for key, p in engine.inflight.partitions.items())
        if trace is not None:
            trace.fetch(messages, queued=buffered > 0, started=fetch_start, returned=consumed)
        marks[4] = clock()
        if restorer.restoring:
            self._restore_step()
        marks[5] = clock()
        self._flow_control()
        feedback = self.feedback
        if feedback is not None and feedback.pending:
            model = self.cost_model
            if model is not None:
                feedback.apply_pending(model)
        if self._hops is not None:
            self._hops.refresh()
        marks[6] = clock()
        ran = engine.run_for(self.run_slice)
        marks[7] = clock()
        if engine.processors:
            ran += engine.fire_wall_clock_timers()
        now = time.monotonic()
        progress = engine.progress
        if progress.due(now):  # also asked after each quantum; this covers a round that ran none
            progress.send(now)
        marks[8] = clock()
        if checkpoint.due(now, worked=bool(ran or messages), buffered=len(scheduler)):
            checkpoint.take()
        if checkpoint.open:
            checkpoint.advance(self._committing())
        marks[9] = clock()
        publisher = self.rates_publisher
        if publisher is not None:
            publisher.poll()
        self.counters.batches += 1
        if self.trace is not None:
            self.trace.recorder.poll(time.time())
        marks[10] = clock()
        watch.end(
            waited=fetcher.waited, queued=buffered + len(messages), run_detail=engine.executor.slowest_quantum
        )
        return len(messages)

    @property
    def engine(self) -> Engine:
        """What runs the records (:mod:`cadenza.worker.engine.engine`); there once started (and after
        the worker closed, for a look at what it ran)."""
        if self._engine is None:
            raise CadenzaError("the worker is not started")
        return self._engine

    @property
    def stopped(self) -> dict[str, PipelineStoppedError]:
        """Pipelines stopped by a failed step (``on_error="stop"``), with what stopped them."""
        return self._engine.stopped if self._engine is not None else {}

    def admit(self, messages: list[Message]) -> None:
        """Decode and queue fetched records (see
        :meth:`Engine.admit <cadenza.worker.engine.engine.Engine.admit>`)."""
        self.engine.admit(messages)

    def run_for(self, seconds: float) -> int:
        """Run quanta, best priority first, until the buffer is empty, ``seconds`` have passed or the
        producer pushes back (see :mod:`cadenza.worker.engine.executor`)."""
        return self.engine.run_for(seconds)

    def _pipeline_stopped(
        self, stopped: PipelineStoppedError, schedules: Sequence[TaskSchedule], dropped: int
    ) -> None:
        """A pipeline stopped (see
        :meth:`Engine.stop_pipeline <cadenza.worker.engine.engine.Engine.stop_pipeline>`): what a
        restart needs to resume at the failed record is kept.

        The record and everything after it in the pipeline's input partitions stay uncommitted, those
        partitions are paused for good (the flow control holds the engine's held topics), and the
        pipeline's state is no longer changelogged, so the changelog stays at a point the replay from
        the committed offsets can build on. Another pipeline reading the same topic stops progressing
        on it too: Kafka keeps one committed offset per partition and group, and it cannot move past
        the held record.
        """
        if self._checkpoint is not None:
            self._checkpoint.stop_changelogging(window for s in schedules for window in s.task.windows)
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

    def _queued(self, topic: str, partition: int) -> int:
        engine = self._engine
        return engine.queued(topic, partition) if engine is not None else 0

    def _partition_buffers(self) -> dict[tuple[str, ...], float | int]:
        """Buffered records per assigned partition, for the scrape thread (reads only lengths)."""
        return {
            (topic, str(partition)): self._queued(topic, partition) for topic, partition in self.assignment
        }

    def _flow_control(self) -> None:
        """Pause and resume partitions for the buffer as it is now (see
        :mod:`cadenza.worker.kafka.fetcher`)."""
        fetcher, output, engine = self._fetcher, self._output, self._engine
        if fetcher is None or output is None or engine is None or not self._consumers:
            return
        was_full = fetcher.flow.full
        fetcher.regulate(
            len(self.scheduler), engine.queued, engine.held, output.pressure, waiting=self._restorer.holding
        )
        full = fetcher.flow.full
        if full != was_full:  # every partition paused: the worker reads nothing (see idle_clock.py)
            if full:
                self.idle_clock.stall()
            else:
                self.idle_clock.unstall()

    def _waiting(self, topic: str) -> list[int]:
        """The assigned partitions of ``topic`` whose records wait in this worker: queued, paused or
        waiting for their state. Their silence downstream is this worker's doing, not their input's,
        so the engine sends heartbeats for them (see ``docs/concepts/watermarks.md``)."""
        fetcher = self._fetcher
        paused = fetcher.flow.paused if fetcher is not None else {}
        holding = self._restorer.holding
        queued = self._queued
        return [
            partition
            for assigned, partition in self.assignment
            if assigned == topic
            and ((topic, partition) in paused or (topic, partition) in holding or queued(topic, partition))
        ]

    def commit(self) -> None:
        """Commit everything that finished, waiting until it is durable: outputs acknowledged, then
        state changelogged, then offsets committed (a revocation, a stop; the run loop's own
        checkpoints do not wait, see :mod:`cadenza.worker.kafka.checkpoint`)."""
        if self._checkpoint is None:
            raise CadenzaError("the worker is not started")
        self._checkpoint.commit(self._committing())

    def _committing(self) -> list[tuple[Consumer, Collection[str] | None]]:
        """The consumers that commit, each with the topics whose offsets it owns (``None``: all)."""
        consumers = self._consumers
        if len(consumers) == 1:
            return [(consumers[0][0], None)]
        # each partition's offset through the consumer that owns it (none once closed)
        return [(consumer, lane.topics) for (consumer, _), lane in zip(consumers, self.lanes, strict=False)]

    # -- rebalancing ----------------------------------------------------------------------------------

    def _restore(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        """Start restoring newly assigned partitions' state; return those that wait for it (paused).

        While any waits, window inputs' idle timeouts stand still (the restorer stalls the idle clock)."""
        installed = self._installed
        held = set(
            self._restorer.begin(
                ((tp.topic, tp.partition), self._stateful(tp.topic, tp.partition))
                for tp in partitions
                if (tp.topic, tp.partition) not in installed
            )
        )
        installed.difference_update((tp.topic, tp.partition) for tp in partitions)
        return [tp for tp in partitions if (tp.topic, tp.partition) in held]

    def _stateful(self, topic: str, partition: int) -> list[tuple[StatefulStep, int]]:
        """The stateful steps that one input partition feeds, each at its partition."""
        engine = self._engine
        return engine.stateful(topic, partition) if engine is not None else []

    def _restore_step(self) -> None:
        """Read changelogs for up to ``restore_slice``; resume the partitions whose state is back."""
        restorer = self._restorer
        try:
            ready = restorer.step(self.restore_slice)
        except BaseException:
            self._rebalance.broken = True  # records must not run on missing state: nothing is committed
            raise
        fetcher = self._fetcher
        if ready and fetcher is not None:
            for topic, partition in ready:
                fetcher.owner(topic).resume([TopicPartition(topic, partition)])
            _log.info("assigned %s (state restored)", ", ".join(f"{t}[{p}]" for t, p in ready))

    # The quarantine guard's view of ownership (see cadenza.worker.reliability.quarantine): how newly assigned
    # partitions' first records run; a clean release clears their suspicion; a loss does not.
    def _guard_assigned(self, partitions: list[TopicPartition]) -> None:
        if self._slot is not None:  # their table entries, before any of their records runs
            self._slot.assign([(tp.topic, tp.partition) for tp in partitions])
        if self._guard is not None:
            self._guard.assigned(partitions)

    def _guard_released(self, partitions: list[TopicPartition]) -> None:
        if self._guard is not None and self._output is not None:
            self._guard.released(partitions)

    def _guard_lost(self, partitions: list[TopicPartition]) -> None:
        if self._guard is not None:
            self._guard.lost(partitions)

    def _commit_on_revoke(self) -> None:
        # What finished is committed before revoked partitions go (the rebalance handler skips this
        # once the worker failed: then nothing may be committed).
        if self._output is not None:
            self.commit()

    def _forget(self, partitions: list[TopicPartition]) -> int:
        """Drop what the worker holds of partitions that went; returns the queued records dropped.

        Their queued records are run again by the next owner, from the last committed offset."""
        keys = [(tp.topic, tp.partition) for tp in partitions]
        if self._checkpoint is not None:
            self._checkpoint.forget(partitions, [pair for key in keys for pair in self._stateful(*key)])
        self._restorer.forget(keys)
        self._flow.forget(set(keys))
        return self._engine.forget(keys) if self._engine is not None else 0


class _PlanHands:
    """The worker's side of plan ownership (:class:`~cadenza.worker.kafka.ownership.Hands`): taking and
    releasing partitions goes through the rebalance handler, as if the group had assigned or revoked
    them, so commits, restores, the quarantine guard and the log lines stay the same."""

    def __init__(self, worker: Worker) -> None:
        self._worker = worker

    def _consumer(self, topic: str) -> Consumer:
        worker = self._worker
        for (consumer, _), lane in zip(worker._consumers, worker.lanes, strict=True):
            if topic in lane.topics:
                return consumer
        raise CadenzaError(f"topic {topic!r} is not read by this worker")

    def holds(self, partition: tuple[str, int]) -> bool:
        return partition in self._worker._rebalance.assignment

    def changelogs(self, partition: tuple[str, int]) -> list[tuple[str, int]]:
        return [(step.changelog_topic, part) for step, part in self._worker._stateful(*partition)]

    def take(
        self, partition: tuple[str, int], warm: Mapping[tuple[str, int], ChangelogReplay] | None
    ) -> None:
        worker = self._worker
        topic, number = partition
        if warm is not None:
            for step, part in worker._stateful(topic, number):
                replay = warm.get((step.changelog_topic, part))
                entries = replay.entries() if replay is not None else {}
                step.restore(part, entries, replay.position if replay is not None else None)
                worker.counters.restored_keys += len(entries)
                _log.info(
                    "restored %s[%d]: %d keys from %d changelog records (warm copy); %s",
                    step.changelog_topic,
                    part,
                    len(entries),
                    replay.records if replay is not None else 0,
                    replay.position if replay is not None else None,
                )
            worker._installed.add(partition)
            worker.counters.warm_installs += 1
        # No offset: the group's committed one, which the old owner committed before it released.
        worker._rebalance.take(self._consumer(topic), [TopicPartition(topic, number)])

    def release(self, partition: tuple[str, int], epoch: int) -> None:
        worker = self._worker
        topic, number = partition
        if self.holds(partition):
            consumer = self._consumer(topic)
            tp = TopicPartition(topic, number)
            worker._rebalance.on_revoke(consumer, [tp])  # commits what finished, then drops it
            consumer.incremental_unassign([tp])
        output = worker._output
        if output is None:
            raise CadenzaError("the worker is not started")
        # After the commit: everything this worker wrote to the state comes before the fences.
        output.fence(self.changelogs(partition), epoch)

    def drop(self, partition: tuple[str, int]) -> None:
        topic, number = partition
        consumer = self._consumer(topic)
        tp = TopicPartition(topic, number)
        self._worker._rebalance.on_lost(consumer, [tp])
        consumer.incremental_unassign([tp])
