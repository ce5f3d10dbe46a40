"""``Stream`` and ``WindowedStream``: immutable handles through which steps are declared.

A handle points at one output of one step; each method appends a step to the handle's pipeline and
returns a handle to it. Handles never change, so a stream can be reused to fan out
(``s.map(f).sink(a); s.filter(g).sink(b)``) without one use affecting the other.

Values flowing between steps are typed (``Stream[Click]`` -> ``filter(lambda c: ...)`` sees a
``Click``) so that mypy checks user functions against the models they read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar, get_args, overload

from cadenza.operators.aggregations import Aggregator, Count, Max, Mean, Min, Sum
from cadenza.operators.join import JoinHow
from cadenza.operators.lift import Lift
from cadenza.pipelines.graph import (
    NodeFunctions,
    SparkOutputMode,
    SparkStageFunctions,
    SparkStageSpec,
    TopicFormat,
)
from cadenza.pipelines.parallel import ExecutorKind, Parallel, ParallelSpec, parallel_spec
from cadenza.pipelines.window_specs import WINDOW_SPEC_TYPES, Hopping, Session, Sliding, Tumbling

if TYPE_CHECKING:
    from pydantic import BaseModel

    from cadenza.pipelines.pipeline import Pipeline, _OpenWindow
    from cadenza.pipelines.processor import ProcessorFactory
    from cadenza.schemas.value_codec import Codec

T = TypeVar("T")
U = TypeVar("U")
A = TypeVar("A")
R = TypeVar("R")

DurationLike = str | float | timedelta


def _function_name(fn: object) -> str:
    name = getattr(fn, "__name__", None)
    return name if isinstance(name, str) else type(fn).__name__


class Stream(Generic[T]):
    """A handle to the output of one step of one pipeline."""

    __slots__ = ("_pipeline", "_port", "_step")

    def __init__(self, pipeline: Pipeline, step: str, port: int = 0) -> None:
        self._pipeline = pipeline
        self._step = step
        self._port = port

    @property
    def pipeline(self) -> Pipeline:
        return self._pipeline

    @property
    def step(self) -> str:
        """Id of the step whose output this handle is (``"2-filter"``)."""
        return self._step

    @property
    def port(self) -> int:
        """Which output of the step: always 0, except for the outputs of a branch."""
        return self._port

    @property
    def keyed(self) -> bool:
        """Whether records carry a key that state (windows, joins) can be partitioned by."""
        return self._pipeline._node(self._step).keyed

    def __repr__(self) -> str:
        port = f", port={self._port}" if self._port else ""
        return f"Stream(pipeline={self._pipeline.name!r}, step={self._step!r}{port})"

    # --- stateless steps ----------------------------------------------------------------------

    def map(
        self,
        fn: Callable[[T], U],
        *,
        name: str | None = None,
        parallel: Parallel = 1,
        executor: ExecutorKind = "process",
        timeout: DurationLike | None = None,
    ) -> Stream[U]:
        """Replace each value by ``fn(value)``; the key, if any, is kept.

        ``parallel``, ``executor`` and ``timeout`` let a heavy or blocking ``fn`` run beside the
        worker's loop, on lessees (see ``docs/parallel.md``): results come out in offset order per
        partition either way."""
        return self._simple("map", fn, name, parallel=(parallel, executor, timeout))

    def filter(
        self,
        fn: Callable[[T], bool],
        *,
        name: str | None = None,
        parallel: Parallel = 1,
        executor: ExecutorKind = "process",
        timeout: DurationLike | None = None,
    ) -> Stream[T]:
        """Keep the records for which ``fn(value)`` is true (``parallel`` and the rest: as :meth:`map`)."""
        return self._simple("filter", fn, name, parallel=(parallel, executor, timeout))

    def flat_map(
        self,
        fn: Callable[[T], Iterable[U]],
        *,
        name: str | None = None,
        parallel: Parallel = 1,
        executor: ExecutorKind = "process",
        timeout: DurationLike | None = None,
    ) -> Stream[U]:
        """Replace each value by the values ``fn(value)`` yields (none, one or many); keys are kept
        (``parallel`` and the rest: as :meth:`map`)."""
        return self._simple("flat_map", fn, name, parallel=(parallel, executor, timeout))

    def key_by(self, fn: Callable[[T], Any], *, name: str | None = None) -> Stream[T]:
        """Key records by ``fn(value)``.

        Records with one key must meet in one partition for keyed state to be correct, so this is a
        repartition point: the compiled graph gives the step a repartition topic
        (``<pipeline>.<step>.repartition``) that the worker writes to and reads back from.
        """
        return self._simple("key_by", fn, name, keyed=True, repartition=True)

    def _simple(
        self,
        kind: Literal["map", "filter", "flat_map", "key_by"],
        fn: Callable[..., Any],
        name: str | None,
        *,
        keyed: bool | None = None,
        repartition: bool = False,
        parallel: tuple[object, object, DurationLike | None] = (1, "process", None),
    ) -> Stream[Any]:
        self._require_callable(fn, f"{kind}()")
        try:
            spec = parallel_spec(kind, fn, *parallel)
        except ValueError as exc:
            raise self._pipeline._error(str(exc), self._pipeline._next_step_id(kind)) from None
        step = self._pipeline._add(
            kind,
            kind,
            name or _function_name(fn),
            ((self._step, self._port),),
            parameters={"function": _function_name(fn), **spec.parameters()},
            functions=NodeFunctions(fn=fn),
            keyed=self.keyed if keyed is None else keyed,
            repartition=repartition,
        )
        return Stream(self._pipeline, step)

    # --- stateful steps -----------------------------------------------------------------------

    def window(
        self, spec: Tumbling | Hopping | Sliding | Session, allowed_lateness: DurationLike = "0s"
    ) -> WindowedStream[T]:
        """Group keyed records into windows; follow with an aggregation (``count()``...).

        ``allowed_lateness`` keeps a window open that long after its end (in event time) so late
        records still count; it also delays the window's result, which is why the scheduler adds it
        to the window's frontier time.
        """
        if not isinstance(spec, WINDOW_SPEC_TYPES):
            raise self._pipeline._error(
                f"window() expects Tumbling, Hopping, Sliding or Session, got {spec!r}", self._step
            )
        if not self.keyed:
            raise self._pipeline._error(
                f"window without a key: window({spec.describe()}) needs keyed records; call key_by(...) "
                "before window(...)",
                self._step,
            )
        # Checked here too, not only at the aggregation, so a refused window is not left open.
        problem = self._pipeline._unsupported("window_aggregate", {}, [self._step])
        if problem is not None:
            raise self._pipeline._error(problem, self._step)
        lateness = self._pipeline._duration(allowed_lateness, "allowed_lateness", self._step)
        opened = self._pipeline._open_window(self._step, spec.describe())
        return WindowedStream(self, spec, lateness, opened)

    @overload
    def join(
        self,
        other: Stream[U],
        within: DurationLike,
        on: Callable[[T, U], bool] | None = None,
        *,
        joiner: None = None,
        how: Literal["inner"] = "inner",
        allowed_lateness: DurationLike = "0s",
        name: str | None = None,
    ) -> Stream[tuple[T, U]]: ...

    @overload
    def join(
        self,
        other: Stream[U],
        within: DurationLike,
        on: Callable[[T, U], bool] | None = None,
        *,
        joiner: None = None,
        how: Literal["left"],
        allowed_lateness: DurationLike = "0s",
        name: str | None = None,
    ) -> Stream[tuple[T, U | None]]: ...

    @overload
    def join(
        self,
        other: Stream[U],
        within: DurationLike,
        on: Callable[[T, U], bool] | None = None,
        *,
        joiner: None = None,
        how: Literal["outer"],
        allowed_lateness: DurationLike = "0s",
        name: str | None = None,
    ) -> Stream[tuple[T | None, U | None]]: ...

    @overload
    def join(
        self,
        other: Stream[U],
        within: DurationLike,
        on: Callable[[T, U], bool] | None = None,
        *,
        joiner: Callable[[Any, Any], R],
        how: JoinHow = "inner",
        allowed_lateness: DurationLike = "0s",
        name: str | None = None,
    ) -> Stream[R]: ...

    def join(
        self,
        other: Stream[U],
        within: DurationLike,
        on: Callable[[T, U], bool] | None = None,
        *,
        joiner: Callable[[Any, Any], Any] | None = None,
        how: JoinHow = "inner",
        allowed_lateness: DurationLike = "0s",
        name: str | None = None,
    ) -> Stream[Any]:
        """Pair records of this stream (left) and ``other`` (right) that have equal keys and event
        times at most ``within`` apart, emitting ``joiner(left, right)`` (by default the tuple
        ``(left, right)``); ``on(left, right)`` can narrow the match further.

        ``how``: ``"inner"`` emits matches only; ``"left"`` also emits ``joiner(left, None)`` for a
        left record that never matched, and ``"outer"`` that and ``joiner(None, right)``. Such a
        result comes once the watermark rules out a match (``t + 2 * within + allowed_lateness``), so
        a record that matches is never also emitted unmatched (see ``docs/concepts/joins.md``).

        Both sides must be keyed (the key is the join condition) and belong to this pipeline: a
        join keeps both sides in one state store, which a single pipeline owns. Read another topic
        with a second ``source()`` of the same pipeline to join it.
        """
        pipeline = self._pipeline
        if not isinstance(other, Stream):
            raise pipeline._error(f"join() expects a Stream, got {other!r}", self._step)
        if other._pipeline is not pipeline:
            raise pipeline._error(
                f"join across pipelines: the other stream belongs to pipeline {other._pipeline.name!r} "
                f"(step {other._step!r}); declare its topic as a second source of {pipeline.name!r}",
                self._step,
            )
        if (other._step, other._port) == (self._step, self._port):
            raise pipeline._error(
                "join of a stream with itself; the two sides would be indistinguishable", self._step
            )
        for side, stream in (("left", self), ("right", other)):
            if not stream.keyed:
                raise pipeline._error(
                    f"join of unkeyed streams: the {side} side (step {stream._step!r}) has no key; call "
                    "key_by(...) on it first",
                    self._step,
                )
        if on is not None:
            self._require_callable(on, "join(on=...)")
        if joiner is not None:
            self._require_callable(joiner, "join(joiner=...)")
        if how not in get_args(JoinHow):
            raise pipeline._error(f"join how must be 'inner', 'left' or 'outer', got {how!r}", self._step)
        within_s = pipeline._duration(within, "join within", self._step)
        lateness = pipeline._duration(allowed_lateness, "allowed_lateness", self._step)
        step = pipeline._add(
            "join",
            "join",
            name or "join",
            ((self._step, self._port), (other._step, other._port)),
            parameters={
                "within_s": within_s,
                "allowed_lateness_s": lateness,
                "on": None if on is None else _function_name(on),
                "how": how,
                "joiner": None if joiner is None else _function_name(joiner),
            },
            functions=NodeFunctions(on=on, fn=joiner),
            keyed=True,
        )
        return Stream(pipeline, step)

    def process(self, factory: ProcessorFactory, *, name: str | None = None) -> Stream[Any]:
        """Run a user :class:`~cadenza.pipelines.Processor`: keyed state, event-time and wall-clock
        timers, and any number of records forwarded per input (see ``docs/how-to/processor.md``).

        ``factory`` is a ``Processor`` subclass or any callable returning a *fresh* processor: the
        worker makes one per input partition, so instances never share attributes across partitions.
        The stream must be keyed (state is per key, and a key's records must meet in one partition);
        the step gets a changelog topic (``<pipeline>.<step>.changelog``) like a window. Its output
        stays keyed: records forwarded under another key are not repartitioned, so put a ``key_by``
        before a later stateful step that needs the new key.
        """
        pipeline = self._pipeline
        if not callable(factory):
            raise pipeline._error(
                f"process() expects a Processor subclass or a factory returning one, got {factory!r}",
                self._step,
            )
        if not self.keyed:
            raise pipeline._error(
                "process without a key: a processor's state is per key; call key_by(...) before process(...)",
                self._step,
            )
        step = pipeline._add(
            "process",
            "process",
            name or _function_name(factory),
            ((self._step, self._port),),
            parameters={"processor": _function_name(factory)},
            functions=NodeFunctions(fn=factory),
            keyed=True,
        )
        return Stream(pipeline, step)

    # --- routing and output -------------------------------------------------------------------

    def branch(self, *predicates: Callable[[T], bool], name: str | None = None) -> tuple[Stream[T], ...]:
        """Split the stream: a record goes to the first branch whose predicate holds, or nowhere.

        Unlike several ``filter()`` calls, a record lands in at most one branch, and the predicates
        run once per record in one step. Every branch must end in a sink.
        """
        if len(predicates) < 2:
            raise self._pipeline._error(
                f"branch() needs at least two predicates, got {len(predicates)}; use filter() for one",
                self._step,
            )
        for index, predicate in enumerate(predicates):
            self._require_callable(predicate, f"branch() predicate {index + 1}")
        step = self._pipeline._add(
            "branch",
            "branch",
            name or "branch",
            ((self._step, self._port),),
            parameters={"branches": len(predicates), "predicates": [_function_name(p) for p in predicates]},
            functions=NodeFunctions(predicates=tuple(predicates)),
            keyed=self.keyed,
            ports=len(predicates),
        )
        return tuple(Stream(self._pipeline, step, port) for port in range(len(predicates)))

    def sink(self, topic: str, *, format: TopicFormat | None = None, codec: Codec | None = None) -> None:
        """Write the stream to ``topic``; a sink ends a path, so nothing can follow it.

        ``format`` (``"json"``, the default, or ``"avro"``) names a built-in codec; ``codec`` takes any
        object implementing the value-codec protocol (:class:`~cadenza.schemas.Codec`) instead.
        """
        pipeline = self._pipeline
        topic = pipeline._topic(topic, what="sink topic", step=self._step)
        format_name, codec = pipeline._codec(format, codec, self._step)
        pipeline._add(
            "sink",
            "sink",
            topic,
            ((self._step, self._port),),
            parameters={"topic": topic, "format": format_name},
            functions=NodeFunctions(codec=codec),
            keyed=self.keyed,
            ports=0,
        )

    def on_spark(
        self,
        transform: Callable[[Any], Any],
        *,
        topic: str,
        value: type[BaseModel] | None = None,
        input: type[BaseModel] | None = None,
        event_time: str | None = None,
        watermark: DurationLike | None = None,
        output_mode: SparkOutputMode = "append",
        result_timestamp: str | Callable[[Any], Any] | None = None,
        name: str | None = None,
    ) -> Stream[Any]:
        """Hand this step to Spark: ``transform(df)`` runs as a Structured Streaming query, and its
        result comes back as a new stream read from ``topic`` (decoded into ``value``).

        ``df`` has one column per field of ``input`` (parsed from the JSON the worker writes), an
        ``event_time`` timestamp column (the ``event_time`` field of ``input``, else the Kafka record
        time), and ``_key``, ``_frontier_time``, ``_hops``, ``_trace_id`` carried from each record's
        scheduling context. With ``watermark`` the event-time column gets one, so windowed
        aggregations can run in ``append`` mode. A result row's ``window`` column (if any) sets its
        frontier time to the window's end; a kept ``_frontier_time`` column sets it otherwise.

        Compiled as two ordinary steps, so the worker runs it unchanged: a JSON sink into the stage's
        input topic (``<pipeline>.<step>.spark-in``) and a source of ``topic``; the graph lists the
        stage in ``spark_stages`` for ``cadenza spark-stage``. ``input`` may be left out when the
        stream comes straight (through filter/key_by/branch only) from a source with a value model.
        """
        pipeline = self._pipeline
        self._require_callable(transform, "on_spark()")
        step = f"{len(pipeline.steps) + 1}-spark_stage"
        model = input if input is not None else pipeline._input_model(self._step)
        if model is None:
            raise pipeline._error(
                "on_spark() needs the model of the records it receives, to give Spark their schema: pass "
                "input=Model (values are untyped after map, flat_map and window steps)",
                step,
            )
        if event_time is not None and event_time not in model.model_fields:
            raise pipeline._error(
                f"on_spark() event_time field {event_time!r} is not a field of {model.__name__} "
                f"(fields: {', '.join(model.model_fields) or 'none'})",
                step,
            )
        if output_mode not in ("append", "update"):
            raise pipeline._error(
                f"on_spark() output_mode must be append or update, got {output_mode!r}", step
            )
        watermark_s = None if watermark is None else pipeline._duration(watermark, "watermark", step)
        result_topic = pipeline._topic(topic, what="on_spark result topic", step=step)
        input_topic = pipeline._topic(
            f"{pipeline.name}.{step}.spark-in", what="Spark stage input topic", step=step
        )
        pipeline._add(
            "sink",
            "spark_stage",
            name or _function_name(transform),
            ((self._step, self._port),),
            parameters={"topic": input_topic, "format": "json", "spark_stage": step},
            functions=NodeFunctions(),
            keyed=self.keyed,
            ports=0,
        )
        # The stage's own output: its contexts (this pipeline's frontier and target) are kept.
        result = pipeline.source(result_topic, value=value, timestamp=result_timestamp, trusted_context=True)
        from cadenza.pipelines.pipeline import qualified_name  # noqa: PLC0415 - import cycle

        pipeline._add_spark_stage(
            SparkStageSpec(
                id=step,
                name=name or _function_name(transform),
                pipeline=pipeline.name,
                tenant=pipeline.tenant,
                latency_target_s=pipeline.latency_target_s,
                input_topic=input_topic,
                output_topic=result_topic,
                input_node=step,
                output_node=result.step,
                transform=_function_name(transform),
                input_model=qualified_name(model),
                value_model=None if value is None else qualified_name(value),
                event_time_field=event_time,
                watermark_s=watermark_s,
                output_mode=output_mode,
            ),
            SparkStageFunctions(transform=transform, input_model=model, value_model=value),
        )
        return result

    def _require_callable(self, fn: object, what: str) -> None:
        if not callable(fn):
            raise self._pipeline._error(f"{what} expects a function, got {fn!r}", self._step)


class WindowedStream(Generic[T]):
    """A keyed stream cut into windows, waiting for the aggregation that makes it a stream again.

    Each aggregation is one stateful step (the window and what it computes run together); its
    output is keyed by the same key, one value per key and window.
    """

    __slots__ = ("_lateness_s", "_opened", "_spec", "_stream")

    def __init__(
        self,
        stream: Stream[T],
        spec: Tumbling | Hopping | Sliding | Session,
        lateness_s: float,
        opened: _OpenWindow,
    ) -> None:
        self._stream = stream
        self._spec = spec
        self._lateness_s = lateness_s
        self._opened = opened

    @property
    def spec(self) -> Tumbling | Hopping | Sliding | Session:
        return self._spec

    @property
    def allowed_lateness_s(self) -> float:
        return self._lateness_s

    def __repr__(self) -> str:
        return f"WindowedStream({self._stream!r}, {self._spec.describe()})"

    def count(
        self, *, name: str | None = None, parallel: Parallel = 1, executor: ExecutorKind = "process"
    ) -> Stream[int]:
        """Records per key and window (``parallel`` and ``executor``: as for :meth:`aggregate`)."""
        return self._builtin("count", name, None, Count(), (parallel, executor))

    def sum(
        self,
        fn: Callable[[T], float],
        *,
        name: str | None = None,
        parallel: Parallel = 1,
        executor: ExecutorKind = "process",
    ) -> Stream[float]:
        """Sum of ``fn(value)`` per key and window (``parallel``, ``executor``: as for :meth:`aggregate`)."""
        self._stream._require_callable(fn, "sum()")
        return self._builtin("sum", name, fn, Sum(fn), (parallel, executor))

    def min(
        self,
        fn: Callable[[T], float],
        *,
        name: str | None = None,
        parallel: Parallel = 1,
        executor: ExecutorKind = "process",
    ) -> Stream[float]:
        """Smallest ``fn(value)`` per key and window, a ``None`` left out (``parallel`` and ``executor``:
        as for :meth:`aggregate`)."""
        self._stream._require_callable(fn, "min()")
        return self._builtin("min", name, fn, Min(fn), (parallel, executor))

    def max(
        self,
        fn: Callable[[T], float],
        *,
        name: str | None = None,
        parallel: Parallel = 1,
        executor: ExecutorKind = "process",
    ) -> Stream[float]:
        """Largest ``fn(value)`` per key and window, a ``None`` left out (``parallel`` and ``executor``:
        as for :meth:`aggregate`)."""
        self._stream._require_callable(fn, "max()")
        return self._builtin("max", name, fn, Max(fn), (parallel, executor))

    def mean(
        self,
        fn: Callable[[T], float],
        *,
        name: str | None = None,
        parallel: Parallel = 1,
        executor: ExecutorKind = "process",
    ) -> Stream[float]:
        """Arithmetic mean of ``fn(value)`` per key and window (kept as a sum and a count); ``None``
        for no values (JSON-safe, unlike NaN), though a window exists only once a record fell in it
        (``parallel`` and ``executor``: as for :meth:`aggregate`)."""
        self._stream._require_callable(fn, "mean()")
        return self._builtin("mean", name, fn, Mean(fn), (parallel, executor))

    def aggregate(
        self,
        init: Callable[[], A],
        add: Callable[[A, T], A],
        merge: Callable[[A, A], A] | None = None,
        *,
        name: str | None = None,
        parallel: Parallel = 1,
        executor: ExecutorKind = "process",
    ) -> Stream[A]:
        """A user aggregation: ``init()`` makes a fresh accumulator per key and window, ``add(acc, value)``
        folds a record in, ``merge(a, b)`` combines two accumulators.

        ``init`` is a function, not a value, so that windows never share a mutable accumulator.
        ``merge`` is required for session windows, which merge when a record bridges two of them.

        ``parallel`` (``N`` or ``"auto"``) and ``executor`` (``"process"`` or ``"thread"``, as for
        :meth:`Stream.map`) take the folding off the worker's thread: lessees compute each record's own
        accumulator ``add(init(), value)``, and the window merges it in, in offset order, before it
        fires as it would otherwise. That needs ``merge``, associative and commutative, with ``init()``
        its identity and ``add(acc, v) == merge(acc, add(init(), v))``; then windows, lateness and dead
        letters are exactly those without lessees (the built-in aggregations satisfy all of it). No
        ``timeout``: a window cannot leave out a record that ran too long.
        """
        for fn, what in ((init, "aggregate() init"), (add, "aggregate() add")):
            self._stream._require_callable(fn, what)
        if merge is not None:
            self._stream._require_callable(merge, "aggregate() merge")
        elif isinstance(self._spec, Session):
            raise self._stream._pipeline._error(
                "aggregate() over session windows needs merge=: sessions merge when a record bridges two",
                self._stream.step,
            )
        return self._aggregate(
            "aggregate",
            name,
            fn=None,
            init=init,
            add=add,
            merge=merge,
            result=_identity,
            parallel=(parallel, executor),
        )

    def _builtin(
        self,
        aggregation: str,
        name: str | None,
        fn: Callable[..., Any] | None,
        aggregator: Aggregator[Any, Any, Any],
        parallel: tuple[object, object],
    ) -> Stream[Any]:
        """A built-in aggregation: the aggregators of :mod:`cadenza.operators.aggregations`, the one
        definition of count, sum, min, max and mean."""
        return self._aggregate(
            aggregation,
            name,
            fn=fn,
            init=aggregator.init,
            add=aggregator.add,
            merge=aggregator.merge,
            result=aggregator.result,
            parallel=parallel,
        )

    def _aggregate(
        self,
        aggregation: str,
        name: str | None,
        *,
        fn: Callable[..., Any] | None,
        init: Callable[[], Any],
        add: Callable[[Any, Any], Any],
        merge: Callable[[Any, Any], Any] | None,
        result: Callable[[Any], Any],
        parallel: tuple[object, object],
    ) -> Stream[Any]:
        stream = self._stream
        spec = self._parallel(aggregation, init=init, add=add, merge=merge, parallel=parallel)
        step = stream._pipeline._add(
            "window_aggregate",
            aggregation,
            name or aggregation,
            ((stream._step, stream._port),),
            parameters={
                "aggregation": aggregation,
                "window": self._spec.model_dump(mode="json"),
                "allowed_lateness_s": self._lateness_s,
                "function": None if fn is None else _function_name(fn),
                **spec.parameters(),
            },
            functions=NodeFunctions(fn=fn, init=init, add=add, merge=merge, result=result),
            keyed=True,
        )
        self._opened.aggregated = True
        return Stream(stream._pipeline, step)

    def _parallel(
        self,
        aggregation: str,
        *,
        init: Callable[[], Any],
        add: Callable[[Any, Any], Any],
        merge: Callable[[Any, Any], Any] | None,
        parallel: tuple[object, object],
    ) -> ParallelSpec:
        """The step's spec, or the error naming pipeline and step of what cannot work with lessees.

        The keywords are checked first on their own, so that a missing ``merge`` is reported before
        whatever in ``init`` or ``add`` would not pickle; then the pickling of what a process lessee
        receives, :class:`~cadenza.operators.Lift` (``init``, ``add`` and a built-in's extractor).
        """
        pipeline = self._stream._pipeline
        count, executor = parallel
        try:
            spec = parallel_spec(aggregation, _identity, count, executor, None)
            if spec.inline:
                return spec
            if merge is None:
                raise ValueError(
                    f"{aggregation}() with parallel={count!r} needs merge=: lessees fold records into "
                    "partial accumulators, which the window merges"
                )
            return parallel_spec(aggregation, Lift(init, add), count, executor, None)
        except ValueError as exc:
            raise pipeline._error(str(exc), pipeline._next_step_id(aggregation)) from None


def _identity(acc: Any) -> Any:
    """A user aggregation's output is its accumulator."""
    return acc
