"""The worker: fetch -> decode -> run -> produce -> commit, for every pipeline of the process.

One consumer (one group) reads every source and repartition topic of every pipeline; one producer
writes everything. A batch goes through the stages in order:

1. **fetch**: ``consume()`` up to ``batch_size`` records (librdkafka's fetch queue is bounded too);
2. **decode**: per record and per sub-topology reading its topic, a :class:`~cadenza.worker.unit.Unit`
   (or a dead letter);
3. **run**: the sub-topology's operator chain on the unit, in offset order per partition;
4. **produce**: operators produce asynchronously as they run; at the end of the batch the producer is
   flushed, which raises if any record was not acknowledged;
5. **commit**: if window state changed, its changelog records and position markers are written and
   flushed (after the outputs, so a position never claims input whose outputs could still be lost),
   then the next offset of every partition in the batch is committed synchronously.

So a committed offset always has every output and every state write of the records below it
acknowledged: at-least-once, with dead-lettered records committed too (their dead letter was
acknowledged). The deadline scheduler will sit between decode and run, queueing units per
operator-partition; nothing else here has to change for it.

Rebalancing (cooperative-sticky, so assignments are incremental): a newly assigned partition's window
state is restored from its changelog inside the assignment callback, before any of its records is
fetched. A revoked or lost partition's state is dropped; nothing is in flight then, because a batch is
finished (flushed and committed) before the next ``consume()`` call, the only place callbacks run.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaException, Message, TopicPartition

from cadenza.errors import CadenzaError
from cadenza.infra.kafka.clients import ClientErrors, make_admin, make_consumer, raise_for_message_error
from cadenza.infra.kafka.errors import KafkaClientError, from_kafka_exception
from cadenza.infra.kafka.topics import TopicSpec, ensure_topics
from cadenza.operators import Window
from cadenza.pipelines import Pipeline, PipelineGraph
from cadenza.settings import KafkaSettings
from cadenza.worker.commits import OffsetCommits
from cadenza.worker.counters import WorkerCounters
from cadenza.worker.operators.window import WindowOp
from cadenza.worker.output import Output
from cadenza.worker.restoring import StateRestorer
from cadenza.worker.task import Task, build_tasks
from cadenza.worker.topics import plan_topics
from cadenza.worker.topology import SubTopology, split
from cadenza.worker.unit import Unit

__all__ = ["Worker"]

Decode = Callable[[Message, str, int, int], Unit | None]
Run = Callable[[Unit, Any, Any, float, Window | None], None]

_log = logging.getLogger("cadenza.worker")


class Worker:
    """Runs pipelines until :meth:`stop`. Use :meth:`run` in the thread that owns the worker.

    ``pipelines`` are :class:`~cadenza.pipelines.Pipeline` objects (compiled here) or compiled graphs.
    Construction checks them (an unsupported step raises, naming the pipeline and step); :meth:`start`
    creates missing topics and joins the group; :meth:`run` starts if needed and loops.
    ``watermark_idle_timeout``: seconds after which an input that delivers nothing stops holding a
    window's watermark back (``None``: never; windows then wait for every input).
    """

    def __init__(
        self,
        pipelines: Sequence[Pipeline | PipelineGraph],
        settings: KafkaSettings,
        *,
        group: str = "cadenza-worker",
        partitions: int = 4,
        batch_size: int = 1000,
        poll_timeout: float = 0.1,
        restore_timeout: float = 60.0,
        watermark_idle_timeout: float | None = 30.0,
        consumer_overrides: dict[str, Any] | None = None,
    ) -> None:
        if not pipelines:
            raise CadenzaError("the worker has no pipeline to run")
        if partitions < 1 or batch_size < 1:
            raise CadenzaError("partitions and batch_size must be at least 1")
        graphs = [p.compile() if isinstance(p, Pipeline) else p for p in pipelines]
        names = [g.name for g in graphs]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise CadenzaError(f"pipelines {duplicates} are declared more than once; names must be unique")
        self.settings = settings
        self.group = group
        self.default_partitions = partitions
        self.batch_size = batch_size
        self.poll_timeout = poll_timeout
        self.restore_timeout = restore_timeout
        self.watermark_idle_timeout = watermark_idle_timeout
        self._consumer_overrides = dict(consumer_overrides or {})
        self.graphs = graphs
        self.subtopologies: list[tuple[PipelineGraph, list[SubTopology]]] = [(g, split(g)) for g in graphs]
        self.counters = WorkerCounters()
        self.topics: list[TopicSpec] = []
        self._stop = threading.Event()
        self._assigned_event = threading.Event()
        self._assignment: set[tuple[str, int]] = set()
        self._lock = threading.Lock()  # guards _assignment, read by other threads
        self._started = False
        self._broken = False
        #: An error raised inside a rebalance callback, re-raised by the loop (librdkafka may swallow it).
        self._failure: BaseException | None = None
        self._output: Output | None = None
        self._consumer: Consumer | None = None
        self._consumer_errors: ClientErrors | None = None
        self._restorer = StateRestorer(settings, group, self.counters, restore_timeout)
        self._tasks: list[Task] = []
        self._routes: dict[str, tuple[Task, ...]] = {}
        #: The hot loop's view of ``_routes``: per topic, each task's (decode, run) bound methods.
        self._stages: dict[str, tuple[tuple[Decode, Run], ...]] = {}
        self._windows: list[WindowOp] = []
        self._commits = OffsetCommits(self.counters)

    # -- what it runs ---------------------------------------------------------------------------------

    @property
    def input_topics(self) -> list[str]:
        return list(dict.fromkeys(s.input_topic for _, subs in self.subtopologies for s in subs))

    def describe(self) -> str:
        """A human summary: pipelines, tenants, sub-topologies and topics."""
        lines = [f"group {self.group}: {len(self.graphs)} pipeline(s)"]
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
        with self._lock:
            return set(self._assignment)

    def wait_assigned(self, timeout: float) -> bool:
        """Block until the group gave this worker partitions (and their state is restored)."""
        return self._assigned_event.wait(timeout)

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
            raise from_kafka_exception(exc, "listing topics") from None
        existing = {
            name: len(topic.partitions)
            for name, topic in metadata.topics.items()
            if topic.error is None and topic.partitions
        }
        self.topics = plan_topics(self.subtopologies, existing, self.default_partitions)
        created = ensure_topics(admin, self.topics, timeout=timeout)
        if created:
            _log.info("created topics: %s", ", ".join(sorted(created)))
        self._output = Output(self.settings)
        for graph, subs in self.subtopologies:
            self._tasks.extend(
                build_tasks(
                    graph, self._output, self.counters, subs, idle_timeout=self.watermark_idle_timeout
                )
            )
        routes: dict[str, list[Task]] = {}
        for task in self._tasks:
            routes.setdefault(task.subtopology.input_topic, []).append(task)
            self._windows.extend(task.windows)
        self._routes = {topic: tuple(tasks) for topic, tasks in routes.items()}
        self._stages = {
            topic: tuple((task.decoder.decode, task.root.process) for task in tasks)
            for topic, tasks in self._routes.items()
        }
        self._consumer, self._consumer_errors = make_consumer(
            self.settings, self.group, **self._consumer_overrides
        )
        self._consumer.subscribe(
            list(self._routes), on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost
        )
        self._started = True
        _log.info("worker started in group %s, reading %s", self.group, ", ".join(self._routes))

    def stop(self) -> None:
        """Ask the worker to stop after the batch in flight; safe from any thread or signal handler."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def run(self) -> None:
        """Process batches until :meth:`stop`, then leave the group. Exceptions propagate, uncommitted."""
        try:
            self.start()
            while not self._stop.is_set():
                self.step()
        except BaseException:
            self._broken = True
            raise
        finally:
            self.close()

    def close(self) -> None:
        """Leave the group and release the clients; after a failure, without committing anything."""
        consumer, self._consumer = self._consumer, None
        try:
            if consumer is not None:
                consumer.close()  # the revoke callback finishes (or, when broken, drops) the batch
        finally:
            self._restorer.close()
            if self._output is not None and not self._broken:
                self._output.close()
            self._started = False

    # -- the stages -------------------------------------------------------------------------------------

    def step(self) -> int:
        """One batch through every stage; returns how many records were fetched."""
        messages = self.fetch()
        if self._failure is not None:
            raise self._failure
        if messages:
            self.process(messages)
            self.finish_batch()
        return len(messages)

    def fetch(self) -> list[Message]:
        consumer, errors = self._consumer, self._consumer_errors
        if consumer is None or errors is None:
            raise CadenzaError("the worker is not started")
        errors.raise_fatal()
        return consumer.consume(self.batch_size, self.poll_timeout)

    def process(self, messages: list[Message]) -> None:
        """Decode and run each record, in fetch order (which is offset order per partition)."""
        stages = self._stages
        positions = self._commits.positions
        units = 0
        for message in messages:
            if message.error() is not None and not self._usable(message):
                continue
            topic = message.topic()
            partition = message.partition()
            offset = message.offset()
            if topic is None or partition is None or offset is None:
                continue
            tasks = stages.get(topic)
            if tasks is not None:
                # Task.decode then Task.run, with the two wrapper calls per record taken out.
                for decode, run in tasks:
                    unit = decode(message, topic, partition, offset)
                    if unit is not None:
                        run(unit, unit.key, unit.value, unit.event_time, None)
                        units += 1
            positions[topic, partition] = offset + 1
        counters = self.counters
        counters.consumed += len(messages)
        counters.units += units

    def _usable(self, message: Message) -> bool:
        try:
            return raise_for_message_error(message)
        except KafkaClientError as exc:
            if exc.retriable:
                _log.warning("transient consumer error: %s", exc)
                return False
            raise

    def finish_batch(self) -> None:
        """Produce and commit: outputs acknowledged, then state changelogged, then offsets committed."""
        output = self._output
        if output is None:
            raise CadenzaError("the worker is not started")
        touched = [window for window in self._windows if window.touched]
        if touched:
            output.flush()
            for window in touched:
                topic = window.changelog_topic
                for partition, writes in window.changelog_writes():
                    for key, value in writes:
                        output.produce(topic, value, key, None, partition)
        output.flush()
        if self._consumer is not None:
            self._commits.commit(self._consumer)
        self.counters.batches += 1

    # -- rebalancing ----------------------------------------------------------------------------------

    def _tasks_of(self, topic: str) -> tuple[Task, ...]:
        return self._routes.get(topic, ())

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        try:
            self._restore(partitions)
        except BaseException as exc:
            # Records of these partitions must not run on missing state: fail the worker. The error is
            # kept for the loop too, in case the client does not re-raise what a callback raised.
            _log.exception("restoring state failed; stopping the worker")
            self._failure = exc
            self._broken = True
            raise
        with self._lock:
            self._assignment.update((tp.topic, tp.partition) for tp in partitions)
        _log.info("assigned %s", ", ".join(f"{tp.topic}[{tp.partition}]" for tp in partitions) or "nothing")
        if partitions:
            self._assigned_event.set()

    def _restore(self, partitions: list[TopicPartition]) -> None:
        self._restorer.restore(
            [
                (window, tp.partition)
                for tp in partitions
                for task in self._tasks_of(tp.topic)
                for window in task.windows
            ]
        )

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # Batches are finished before the next consume(), so normally nothing is pending here; finish
        # anyway rather than drop work, unless the worker failed (then nothing may be committed).
        if self._commits and not self._broken:
            self.finish_batch()
        self._forget(partitions, "revoked")

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # Lost partitions belong to someone else already: committing for them would fail or, worse,
        # succeed over the new owner's progress. Drop their pending offsets and state.
        self._forget(partitions, "lost")

    def _forget(self, partitions: list[TopicPartition], why: str) -> None:
        self._commits.forget(partitions)
        for tp in partitions:
            for task in self._tasks_of(tp.topic):
                for window in task.windows:
                    window.drop(tp.partition)
        with self._lock:
            self._assignment.difference_update((tp.topic, tp.partition) for tp in partitions)
        if partitions:
            _log.info("%s %s", why, ", ".join(f"{tp.topic}[{tp.partition}]" for tp in partitions))
