"""Run pipelines in-process with no broker, on a virtual clock: cadenza's ``TopologyTestDriver``.

The driver assembles the pipelines exactly as a worker does (:func:`cadenza.worker.engine.plan.assemble`:
the same tasks, operators, schedules, policy and :class:`~cadenza.scheduling.Scheduler`) and runs them
on the worker's own engine (:class:`~cadenza.worker.engine.engine.Engine`: its admission, run stage,
timers, progress records and pipeline stop); only the Kafka transport is swapped for the in-memory
one of :mod:`cadenza.worker.engine.memory`. So a test of a pipeline exercises the code that runs
it in production: decoding (bad input is dead-lettered), scheduling contexts, event time, windows,
lateness, key_by repartitioning and the watermark's progress records.

Each :meth:`PipelineDriver.pipe` runs to quiescence before it returns: the record is admitted, every
queued record is run by priority, whatever was produced to a topic the pipelines read (a key_by's
repartition topic, or a sink another pipeline reads) is fetched and run in turn, and the key_bys send
their progress records after each round, as if ``progress_interval`` had passed. A repartitioned
record goes to the partition the worker's producer would choose (``crc32(key) % partitions``), so
windows close as they do in a worker. Time moves only when told: record timestamps default to the
clock, and :meth:`PipelineDriver.advance` moves the wall clock that watermark idle timeouts measure.

Outputs are deterministic per partition (offset order, as in a worker). Which operator-partition
runs first within one round follows the policy's priority, and its cost estimates learn from
measured run times, so results of different partitions may interleave differently from run to run:
compare them per partition or as a multiset, not as one list.

:meth:`PipelineDriver.advance` also fires the process steps' wall-clock timers that became due, and
runs what they emit, as the worker's loop does.

What it does not do: commits, changelog writes and restores (there is no broker to make durable),
rebalancing, metrics export and spans.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType, TracebackType
from typing import Any

import pydantic_core
from pydantic import BaseModel

from cadenza.errors import CadenzaError
from cadenza.infra.kafka.clients import ClientErrors
from cadenza.infra.metrics.prometheus import PrometheusExporter
from cadenza.pipelines import Pipeline, PipelineGraph
from cadenza.scheduling.clock import VirtualClock
from cadenza.scheduling.context import CONTEXT_HEADER, SchedulingContext, decode_context
from cadenza.scheduling.policy import SchedulingPolicy
from cadenza.scheduling.scheduler import Scheduler
from cadenza.state import StateStore, store_factory
from cadenza.worker.engine.counters import WorkerCounters
from cadenza.worker.engine.dead_letter import PipelineStoppedError
from cadenza.worker.engine.decode import SourceDecoder, value_codec
from cadenza.worker.engine.engine import Engine, EngineTransport
from cadenza.worker.engine.executor import SchedKey
from cadenza.worker.engine.idle_clock import IdleClock
from cadenza.worker.engine.lessees.cores import available_cores
from cadenza.worker.engine.lessees.hub import LesseeHub
from cadenza.worker.engine.memory import MemoryProducer, MemoryTopics, StoredRecord
from cadenza.worker.engine.operators.join_step import JoinInput
from cadenza.worker.engine.operators.process_step import ProcessOp
from cadenza.worker.engine.operators.window_step import WindowOp
from cadenza.worker.engine.output import Output
from cadenza.worker.engine.plan import assemble
from cadenza.worker.engine.topics import plan_topics
from cadenza.worker.engine.topology import SubTopology, check_copartitioned, split
from cadenza.worker.engine.unit import Unit
from cadenza.worker.engine.wire import encode_sink_key
from cadenza.worker.layout import make_policy

__all__ = ["OutputRecord", "PipelineDriver"]


@dataclass(frozen=True, slots=True)
class OutputRecord:
    """A record a pipeline wrote, as a consumer of that topic would read it.

    ``value`` is decoded: JSON as Python objects (a window result is its envelope, ``{"key",
    "window_start", "window_end", "value"}``), or a model instance when :meth:`PipelineDriver.outputs`
    was given one; otherwise the bytes. ``key`` is JSON-decoded when it is JSON, else text.
    ``context`` is the scheduling context the record carries (``cadenza-ctx``), if any.
    """

    topic: str
    partition: int
    offset: int
    key: Any
    value: Any
    #: Seconds since the epoch (the Kafka timestamp: the driver's clock when it was produced).
    timestamp: float
    headers: Mapping[str, bytes | None]
    context: SchedulingContext | None
    raw_key: bytes | None
    raw_value: bytes | None


def _decode_json(raw: bytes | None, *, text: bool = False) -> Any:
    """JSON when ``raw`` is JSON; otherwise the bytes as they are, or as text for a key (``text``)."""
    if raw is None:
        return None
    try:
        return pydantic_core.from_json(raw)
    except ValueError:
        return raw.decode("utf-8", "replace") if text else raw


#: Longest the driver waits for a lessee's answer before it looks again (it ends early on one).
LESSEE_WAIT = 0.05


class PipelineDriver:
    """Runs ``pipelines`` in this process with no broker (see the module docstring).

    ``clock``: the virtual wall clock (record timestamps default to it; watermark idle timeouts and
    the scheduler read it); ``VirtualClock(0.0)`` when not given. ``policy``: as for the worker.
    ``partitions``: how many partitions topics have, unless ``topic_partitions`` names a count (the
    worker's rule applies: a repartition topic and a changelog have as many as the topic read before
    them). ``idle_timeout``: the worker's ``watermark_idle_timeout``. ``lessees``: steps declared with
    ``parallel=`` run on lessees as in a worker (``False``: on the calling thread, as with
    ``parallel=1``, which is how a test compares the two); ``cores``: the worker's ``cores``.

    Use it as a context manager (or call :meth:`close`) so state stores are released.
    """

    def __init__(
        self,
        pipelines: Sequence[Pipeline | PipelineGraph],
        *,
        clock: VirtualClock | None = None,
        policy: str | SchedulingPolicy = "cameo",
        partitions: int = 1,
        topic_partitions: Mapping[str, int] | None = None,
        idle_timeout: float | None = 30.0,
        quantum_records: int = 16,
        lessees: bool = True,
        cores: int | None = None,
    ) -> None:
        if not pipelines:
            raise CadenzaError("the driver has no pipeline to run")
        if partitions < 1:
            raise CadenzaError(f"partitions must be at least 1, got {partitions!r}")
        graphs = [p.compile() if isinstance(p, Pipeline) else p for p in pipelines]
        names = [graph.name for graph in graphs]
        if len(set(names)) != len(names):
            raise CadenzaError(f"pipelines {sorted(names)} are declared more than once; names must be unique")
        self.clock = clock if clock is not None else VirtualClock(0.0)
        self.graphs = {graph.name: graph for graph in graphs}
        subtopologies: list[tuple[PipelineGraph, list[SubTopology]]] = [(g, split(g)) for g in graphs]
        specs = plan_topics(subtopologies, dict(topic_partitions or {}), partitions)
        counts = {spec.name: spec.partitions for spec in specs}
        for graph, subs in subtopologies:
            check_copartitioned(graph, subs, counts)
        self.topics = MemoryTopics(counts, self.clock.now)
        self._producer = MemoryProducer(self.topics)
        self.policy = make_policy(policy, graphs)
        self.scheduler: Scheduler[SchedKey, Unit] = Scheduler(
            self.policy, clock=self.clock, max_records=quantum_records, max_seconds=None
        )
        output = Output.over(self._producer, ClientErrors("producer"))
        #: What the worker would count (consumed, produced, late, dead letters by kind...).
        self.counters = WorkerCounters()
        # Without read_gap: the driver's loop never stalls, so its idle clock is the virtual clock.
        idle_clock = IdleClock(self.clock.now)
        self.plan = assemble(
            subtopologies,
            output=output,
            counters=self.counters,
            policy=self.policy,
            exporter=PrometheusExporter(),
            emitter=None,
            partitions=counts,
            idle_timeout=idle_timeout,
            store_factory=store_factory("memory"),
            registry_client=None,
            clock=idle_clock.now,
            wall_clock=self.clock.now,
            lessees=(LesseeHub(cores=cores or available_cores(), wall=self.clock.now) if lessees else None),
            read_clock=idle_clock,
        )
        self._engine = Engine(
            self.plan,
            self.scheduler,
            EngineTransport(output, now=self.clock.now),
            counters=self.counters,
            read_clock=idle_clock,
            # Progress records go out after every round (as if progress_interval had passed).
            progress_interval=math.inf,
            idle_timeout=None,
        )
        #: What a test may pipe into.
        self._sources = {topic for graph in graphs for topic in graph.source_topics}

    # -- input ------------------------------------------------------------------------------------------

    def pipe(
        self,
        topic: str,
        value: Any,
        *,
        key: Any = None,
        timestamp: float | None = None,
        headers: Mapping[str, str | bytes] | Sequence[tuple[str, str | bytes]] | None = None,
        partition: int | None = None,
    ) -> None:
        """Produce one record to source ``topic`` and run everything it leads to.

        ``value``: bytes are sent as they are (so a test can send garbage); anything else is encoded
        with the source's format (JSON, or schemaless Avro). ``key``: bytes as they are, text as UTF-8,
        anything else as JSON. ``timestamp``: the Kafka timestamp in seconds (default: the clock).
        ``partition``: default, the producer's choice from the key.
        """
        self._deliver([self._append(topic, value, key, timestamp, headers, partition)])

    def _append(  # noqa: PLR0917 - pipe's arguments, in its order
        self,
        topic: str,
        value: Any,
        key: Any,
        timestamp: float | None,
        headers: Mapping[str, str | bytes] | Sequence[tuple[str, str | bytes]] | None,
        partition: int | None,
    ) -> StoredRecord:
        if topic not in self._sources:
            raise CadenzaError(
                f"{topic!r} is not a source topic of the pipelines; they read {sorted(self._sources)}"
            )
        raw, extra = self._encode(topic, value)
        pairs = list(headers.items()) if isinstance(headers, Mapping) else list(headers or ())
        stored = [(name, item.encode() if isinstance(item, str) else item) for name, item in pairs]
        raw_key = key if isinstance(key, bytes) or key is None else encode_sink_key(key)
        return self.topics.append(
            topic,
            raw,
            raw_key,
            [*stored, *extra],
            partition=-1 if partition is None else partition,
            timestamp_ms=None if timestamp is None else round(timestamp * 1000),
        )

    def pipe_many(self, topic: str, values: Sequence[Any], *, batch: bool = False, **options: Any) -> None:
        """:meth:`pipe` each of ``values`` with the same options.

        ``batch``: all of them in one delivery, as one fetch hands a worker several records (and,
        downstream, a repartition topic's records with its progress records): the interleavings
        that only a batch has, such as records still at a lessee while later ones arrive."""
        if not batch:
            for value in values:
                self.pipe(topic, value, **options)
            return
        key, timestamp = options.get("key"), options.get("timestamp")
        headers, partition = options.get("headers"), options.get("partition")
        self._deliver([self._append(topic, value, key, timestamp, headers, partition) for value in values])

    def advance(self, seconds: float) -> float:
        """Move the wall clock on by ``seconds`` (idle timeouts count it); returns the new time.

        As in a worker, passing time alone runs no record: an input that went idle stops holding a
        window back when the next record or progress record reaches the window. What it does run,
        as the worker's loop does, is the process steps' wall-clock timers now due, and everything
        their outputs lead to.
        """
        now = self.clock.advance(seconds)
        self._fire_wall_clock_timers()
        return now

    # -- output -----------------------------------------------------------------------------------------

    def outputs(self, topic: str, model: type[BaseModel] | None = None) -> list[OutputRecord]:
        """Every record written to ``topic`` so far, partition by partition in offset order.

        With ``model``, values are decoded into it with the topic's format (the sink's, JSON or Avro).
        """
        self.topics.count(topic)  # a clear error for a topic the pipelines do not know
        codec = None if model is None else value_codec(self._format_of(topic), model, topic, None)
        return [self._read(record, codec) for record in self.topics.read(topic)]

    def dead_letters(self, pipeline: str) -> list[OutputRecord]:
        """The dead letters of ``pipeline`` (the consumed record and headers saying what failed)."""
        return self.outputs(self._graph(pipeline).dead_letter_topic)

    def late(self, pipeline: str) -> list[OutputRecord]:
        """The late records of ``pipeline``: values that arrived after their window had closed."""
        return self.outputs(self._graph(pipeline).late_topic)

    def state(self, pipeline: str, step: str) -> Mapping[Any, Any]:
        """A read-only copy of stateful ``step``'s store (a window, join or process step), keyed by
        record key and, when the step's input has several partitions, merged over them.

        For a window step each value is what the store holds for the key: its open windows as
        ``[start, end, accumulator]`` triples, and the rest of the step's bookkeeping. For a process
        step it is ``[state, event-time timers, wall-clock timers]``.
        """
        self._graph(pipeline)
        for schedule in self.plan.schedules:
            if schedule.pipeline != pipeline:
                continue
            for stateful in schedule.task.windows:
                if stateful.node_id != step:
                    continue
                if isinstance(stateful, WindowOp):
                    return _snapshot(stateful.store, stateful.partitions)
                if isinstance(stateful, JoinInput):
                    return _snapshot(stateful.join.store, stateful.join.partitions)
                if isinstance(stateful, ProcessOp):
                    return _snapshot(stateful.store, stateful.partitions)
        steps = sorted(
            {w.node_id for s in self.plan.schedules if s.pipeline == pipeline for w in s.task.windows}
        )
        raise CadenzaError(
            f"pipeline {pipeline!r} has no stateful step {step!r}; its stateful steps: {steps}"
        )

    # -- lifecycle --------------------------------------------------------------------------------------

    @property
    def stopped(self) -> Mapping[str, PipelineStoppedError]:
        """Pipelines stopped by a failed step (``on_error="stop"``), with what stopped them."""
        return self._engine.stopped

    def close(self) -> None:
        """Release the state stores; safe to call more than once."""
        self._engine.close()

    def __enter__(self) -> PipelineDriver:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- the loop ---------------------------------------------------------------------------------------

    def _deliver(self, records: list[StoredRecord]) -> None:
        """Admit ``records``, run until nothing is queued, and feed back what the pipelines read."""
        engine = self._engine
        while records:
            engine.admit([record.message() for record in records])
            engine.run_for(math.inf)
            while engine.lessee_held:  # the parallel steps' calls, released as they come back
                engine.wait_for_lessees(LESSEE_WAIT)
                engine.run_for(math.inf)
            engine.progress.send(self.clock.now(), everything=True)
            engine.inflight.advanced()  # nothing is committed here: only keep the bookkeeping short
            records = [record for record in self._producer.take() if record.topic in engine.stages]

    def _fire_wall_clock_timers(self) -> None:
        """Fire due wall-clock timers and run what they produced to quiescence."""
        engine = self._engine
        engine.fire_wall_clock_timers()
        engine.progress.send(self.clock.now(), everything=True)
        self._deliver([record for record in self._producer.take() if record.topic in engine.stages])

    # -- helpers ----------------------------------------------------------------------------------------

    def _graph(self, pipeline: str) -> PipelineGraph:
        graph = self.graphs.get(pipeline)
        if graph is None:
            raise CadenzaError(f"no pipeline {pipeline!r} under test; pipelines: {sorted(self.graphs)}")
        return graph

    def _format_of(self, topic: str) -> str:
        for graph in self.graphs.values():
            for node in graph.nodes:
                if node.kind in ("sink", "source") and node.parameters.get("topic") == topic:
                    return str(node.parameters.get("format", "json"))
        return "json"

    def _encode(self, topic: str, value: Any) -> tuple[bytes | None, list[tuple[str, bytes | None]]]:
        if value is None or isinstance(value, bytes):
            return value, []
        for task in self.plan.routes.get(topic, ()):
            decoder = task.decoder
            if isinstance(decoder, SourceDecoder) and self._format_of(topic) == "avro":
                return decoder.codec.encode(value), list(decoder.codec.headers())
        try:
            return pydantic_core.to_json(value), []
        except pydantic_core.PydanticSerializationError as exc:
            raise CadenzaError(f"cannot encode {type(value).__name__} for {topic!r} as JSON: {exc}") from exc

    def _read(self, record: StoredRecord, codec: Any) -> OutputRecord:
        raw_ctx = next((item for name, item in record.headers if name == CONTEXT_HEADER), None)
        if codec is not None and record.value is not None:
            value = codec.decode(record.value)
        else:
            value = _decode_json(record.value)
        return OutputRecord(
            topic=record.topic,
            partition=record.partition,
            offset=record.offset,
            key=_decode_json(record.key, text=True),
            value=value,
            timestamp=record.timestamp_ms / 1000.0,
            headers=MappingProxyType(dict(record.headers)),
            context=None if raw_ctx is None else decode_context(raw_ctx),
            raw_key=record.key,
            raw_value=record.value,
        )


def _snapshot(store: StateStore, partitions: Mapping[int, Any]) -> Mapping[Any, Any]:
    merged: dict[Any, Any] = {}
    for partition in sorted(partitions):
        for key, value in store.items(partition):
            merged[key] = copy.deepcopy(value)  # a view a test cannot change the step through
    return MappingProxyType(merged)
