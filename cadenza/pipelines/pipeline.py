"""``Pipeline``: where a declaration starts, and where it is compiled into a :class:`PipelineGraph`.

A pipeline is a small builder: every ``Stream`` call appends one step to the pipeline it came from,
and ``compile()`` checks the whole and freezes it. Rules that a single call can check (a window
needs a key, a join needs two keyed streams of the same pipeline, no key_by, window or join follows a
join, no Avro sink takes window results) are checked at that call, so the traceback points at the
offending line; rules about the whole graph (there is a sink, every path ends in one, no topic feeds
itself) wait for ``compile()``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar, cast, get_args, overload

from pydantic import BaseModel, JsonValue

from cadenza.durations import parse_duration
from cadenza.pipelines._format import format_duration
from cadenza.pipelines._naming import MAX_PIPELINE_NAME_LENGTH, name_problem
from cadenza.pipelines.errors import PipelineDefinitionError
from cadenza.pipelines.graph import (
    STATEFUL_KINDS,
    EdgeSpec,
    InternalTopic,
    NodeFunctions,
    NodeKind,
    NodeSpec,
    OnError,
    PipelineGraph,
    SparkStageFunctions,
    SparkStageSpec,
    TopicFormat,
    unsupported_by_worker,
)
from cadenza.pipelines.stream import Stream

if TYPE_CHECKING:
    from cadenza.schemas.value_codec import Codec

M = TypeVar("M", bound=BaseModel)

KeyType = type[BaseModel] | type[str] | type[bytes]
_FORMATS: tuple[str, ...] = ("json", "avro")


@dataclass(frozen=True)
class _Node:
    """A step as the builder keeps it: inputs are (upstream id, upstream output port)."""

    id: str
    kind: NodeKind
    name: str
    inputs: tuple[tuple[str, int], ...]
    parameters: dict[str, JsonValue]
    functions: NodeFunctions
    keyed: bool
    ports: int = 1
    repartition: bool = False


@dataclass
class _OpenWindow:
    """A ``window()`` call not yet followed by an aggregation; compile() refuses to drop it silently."""

    step: str
    spec: str
    aggregated: bool = False


def qualified_name(obj: Any) -> str:
    """``module.QualName`` of a class, for graphs and messages (the class itself is not serializable)."""
    return f"{obj.__module__}.{obj.__qualname__}"


class Pipeline:
    """A query: a DAG from source topics to sink topics owned by ``tenant`` with latency target ``L``.

    ``latency_target`` is what the scheduler's deadlines are computed from (``t_F + L``), so it is
    required and must be positive. ``tenant_weight`` is the tenant's share under the ``fair`` policy.
    The dead-letter and late topics receive records a step failed on and records that arrived after
    their window closed; by default they are named after the pipeline.

    ``on_error`` decides what a user function that raises does to the pipeline. ``"dead_letter"``
    (the default) sends the record to the dead-letter topic and goes on: one bad record must not hold
    up a tenant. ``"stop"`` is for pipelines where skipping a record is worse than stopping: the worker
    stops running this pipeline at that record, leaves it uncommitted (a restart, after a fix, begins
    there) and keeps running the other pipelines. Records that fail to decode are dead-lettered either
    way: they are bad input, not a bug in the pipeline.
    """

    def __init__(
        self,
        name: str,
        tenant: str,
        latency_target: str | float | timedelta,
        *,
        tenant_weight: float = 1.0,
        dead_letter_topic: str | None = None,
        late_topic: str | None = None,
        on_error: OnError = "dead_letter",
    ) -> None:
        problem = name_problem(name, what="pipeline name", max_length=MAX_PIPELINE_NAME_LENGTH)
        if problem is not None:
            # The message already quotes the name; a "pipeline 'bad name':" prefix would only repeat it.
            raise PipelineDefinitionError(problem)
        self._name = name
        problem = name_problem(tenant, what="tenant")
        if problem is not None:
            raise self._error(problem)
        self._tenant = tenant
        try:
            self._latency_target_s = parse_duration(latency_target, what="latency target")
        except ValueError as exc:
            raise self._error(str(exc)) from None
        if self._latency_target_s <= 0:
            raise self._error(f"latency target must be greater than zero, got {latency_target!r}")
        if (
            isinstance(tenant_weight, bool)
            or not isinstance(tenant_weight, int | float)
            or not math.isfinite(tenant_weight)
            or tenant_weight <= 0
        ):
            raise self._error(f"tenant weight must be a positive number, got {tenant_weight!r}")
        self._tenant_weight = float(tenant_weight)
        if on_error not in get_args(OnError):
            raise self._error(f"on_error must be 'dead_letter' or 'stop', got {on_error!r}")
        self._on_error: OnError = on_error
        self._dead_letter_topic = self._topic(
            f"{name}.dlq" if dead_letter_topic is None else dead_letter_topic, what="dead-letter topic"
        )
        self._late_topic = self._topic(
            f"{name}.late" if late_topic is None else late_topic, what="late topic"
        )
        self._nodes: dict[str, _Node] = {}
        self._open_windows: list[_OpenWindow] = []
        self._spark_stages: list[tuple[SparkStageSpec, SparkStageFunctions]] = []

    # --- read-only configuration -------------------------------------------------------------

    @property
    def name(self) -> str:
        return self._name

    @property
    def tenant(self) -> str:
        return self._tenant

    @property
    def tenant_weight(self) -> float:
        return self._tenant_weight

    @property
    def latency_target_s(self) -> float:
        return self._latency_target_s

    @property
    def on_error(self) -> OnError:
        return self._on_error

    @property
    def dead_letter_topic(self) -> str:
        return self._dead_letter_topic

    @property
    def late_topic(self) -> str:
        return self._late_topic

    @property
    def steps(self) -> list[str]:
        """Ids of the steps declared so far, in declaration order."""
        return list(self._nodes)

    def __repr__(self) -> str:
        return (
            f"Pipeline({self._name!r}, tenant={self._tenant!r}, "
            f"latency_target={format_duration(self._latency_target_s)!r}, steps={len(self._nodes)})"
        )

    # --- declaration ------------------------------------------------------------------------

    @overload
    def source(
        self,
        topic: str,
        *,
        value: type[M],
        key: KeyType | None = None,
        format: TopicFormat | None = None,
        codec: Codec | None = None,
        timestamp: str | Callable[[M], Any] | None = None,
        max_out_of_orderness: str | float | timedelta = "0s",
        trusted_context: bool = False,
    ) -> Stream[M]: ...

    @overload
    def source(
        self,
        topic: str,
        *,
        value: None = None,
        key: KeyType | None = None,
        format: TopicFormat | None = None,
        codec: Codec | None = None,
        timestamp: str | Callable[[Any], Any] | None = None,
        max_out_of_orderness: str | float | timedelta = "0s",
        trusted_context: bool = False,
    ) -> Stream[Any]: ...

    def source(
        self,
        topic: str,
        *,
        value: type[BaseModel] | None = None,
        key: KeyType | None = None,
        format: TopicFormat | None = None,
        codec: Codec | None = None,
        timestamp: str | Callable[[Any], Any] | None = None,
        max_out_of_orderness: str | float | timedelta = "0s",
        trusted_context: bool = False,
    ) -> Stream[Any]:
        """Read ``topic``; records are decoded into ``value`` (a pydantic model) or left raw.

        ``timestamp`` says where event time comes from: a field of the value, a function of the value,
        or ``None`` for the Kafka record timestamp. ``max_out_of_orderness`` is how far behind the
        newest event time a record may be and still count as on time; watermarks trail by it.
        A source is keyed (by the Kafka record key, so without a repartition) only when ``key`` is
        given: declaring the key type is how a user says the producer partitioned by something
        meaningful.

        ``format`` (``"json"``, the default, or ``"avro"``) names a built-in codec; ``codec`` takes any
        object implementing the value-codec protocol (:class:`~cadenza.schemas.Codec`) instead.

        ``trusted_context``: the topic is written by an earlier stage of this pipeline (a Spark stage,
        say), so a ``cadenza-ctx`` header on its records that names this pipeline and tenant is kept.
        By default a source record gets a fresh context whatever its headers claim: in a shared pool
        the priority a record claims must not be its producer's to choose.
        """
        step = f"{len(self._nodes) + 1}-source"
        topic = self._topic(topic, what="source topic", step=step)
        for node in self._nodes.values():
            if node.kind == "source" and node.parameters["topic"] == topic:
                raise self._error(
                    f"topic {topic!r} is already read by step {node.id!r}; reuse that stream instead of a "
                    "second source (each record would be processed twice)",
                    step,
                )
        if value is not None and not (isinstance(value, type) and issubclass(value, BaseModel)):
            raise self._error(f"value must be a pydantic model class or None, got {value!r}", step)
        if key is not None and not (
            isinstance(key, type) and (issubclass(key, BaseModel) or key in (str, bytes))
        ):
            raise self._error(f"key must be a pydantic model class, str, bytes or None, got {key!r}", step)
        format_name, codec = self._codec(format, codec, step)
        timestamp_kind, timestamp_field, timestamp_fn = self._timestamp(timestamp, value, step)
        lag = self._duration(max_out_of_orderness, "max_out_of_orderness", step)
        key_name = None if key is None else key.__name__ if key in (str, bytes) else qualified_name(key)
        node_id = self._add(
            "source",
            "source",
            topic,
            (),
            parameters={
                "topic": topic,
                "format": format_name,
                "value": None if value is None else qualified_name(value),
                "key": key_name,
                "timestamp": timestamp_kind,
                "timestamp_field": timestamp_field,
                "max_out_of_orderness_s": lag,
                **({"trusted_context": True} if trusted_context else {}),
            },
            functions=NodeFunctions(
                timestamp=timestamp_fn,
                value_model=value,
                key_model=key,
                codec=codec,
            ),
            keyed=key is not None,
        )
        return Stream(self, node_id)

    def _timestamp(
        self, timestamp: object, value: type[BaseModel] | None, step: str
    ) -> tuple[str, str | None, Callable[[Any], Any] | None]:
        if timestamp is None:
            return "kafka", None, None
        if isinstance(timestamp, str):
            if value is not None and timestamp not in value.model_fields:
                fields = ", ".join(value.model_fields) or "none"
                raise self._error(
                    f"timestamp field {timestamp!r} is not a field of {value.__name__} (fields: {fields})",
                    step,
                )
            return "field", timestamp, _field_getter(timestamp)
        if callable(timestamp):
            return "callable", None, timestamp
        raise self._error(
            f"timestamp must be a field name, a function or None (Kafka timestamp), got {timestamp!r}", step
        )

    # --- compilation ------------------------------------------------------------------------

    def compile(self) -> PipelineGraph:
        """Check the whole declaration and freeze it into a graph; the pipeline may keep growing after."""
        nodes = list(self._nodes.values())
        if not nodes:
            raise self._error("no source; start with pipeline.source(topic, value=Model)")
        for window in self._open_windows:
            if not window.aggregated:
                raise self._error(
                    f"window({window.spec}) is never aggregated; follow it with count(), sum(), min(), "
                    "max(), mean() or aggregate()",
                    window.step,
                )
        consumers: dict[tuple[str, int], list[str]] = {}
        for node in nodes:
            for upstream in node.inputs:
                consumers.setdefault(upstream, []).append(node.id)
        leaves = [
            n for n in nodes if n.kind != "sink" and not any((n.id, p) in consumers for p in range(n.ports))
        ]
        if not any(n.kind == "sink" for n in nodes):
            where = "here" if len(leaves) == 1 else "at steps " + ", ".join(repr(n.id) for n in leaves)
            raise self._error(
                f"no sink: the stream ends {where} without writing anywhere; end it with sink(topic)",
                leaves[0].id,
            )
        for node in nodes:
            if node.kind == "branch":
                for port in range(node.ports):
                    if (node.id, port) not in consumers:
                        raise self._error(
                            f"dangling branch: branch {port + 1} of {node.ports} is never consumed; every "
                            "branch must end in a sink",
                            node.id,
                        )
        for leaf in leaves:
            raise self._error(self._dangling(leaf), leaf.id)
        self._check_topics(nodes)
        return self._graph(nodes, consumers)

    def _dangling(self, leaf: _Node) -> str:
        # Walk up single-input steps: if the path leaves a branch, say which branch, since "branch 2 has
        # no sink" is what the user has to fix, not the last map on it.
        current = leaf
        while len(current.inputs) == 1:
            upstream_id, port = current.inputs[0]
            upstream = self._nodes[upstream_id]
            if upstream.kind == "branch":
                return (
                    f"dangling branch: branch {port + 1} of step {upstream.id!r} ends here without a sink; "
                    "every branch must end in sink(topic)"
                )
            current = upstream
        return "dangling stream: this step is not followed by a sink; every path must end in sink(topic)"

    def _check_topics(self, nodes: list[_Node]) -> None:
        sources = {str(n.parameters["topic"]): n.id for n in nodes if n.kind == "source"}
        internal = set(self._internal_topic_names(nodes))
        for node in nodes:
            if node.kind == "sink":
                topic = str(node.parameters["topic"])
                if topic in sources:
                    raise self._error(
                        f"sink topic {topic!r} is also a source topic of this pipeline (step "
                        f"{sources[topic]!r}); the pipeline would consume its own output forever",
                        node.id,
                    )
                if topic in internal:
                    raise self._error(f"sink topic {topic!r} is an internal topic of this pipeline", node.id)
            if node.kind == "source" and node.parameters["topic"] in internal:
                raise self._error(
                    f"source topic {node.parameters['topic']!r} is an internal topic of this pipeline",
                    node.id,
                )
        for topic in internal:
            problem = name_problem(topic, what="internal topic")
            if problem is not None:  # pragma: no cover - name lengths are bounded when declared
                raise self._error(problem)

    def _internal_topic_names(self, nodes: list[_Node]) -> list[str]:
        return [topic.name for topic in self._internal_topics(nodes)]

    def _internal_topics(self, nodes: list[_Node]) -> list[InternalTopic]:
        topics: list[InternalTopic] = []
        for node in nodes:
            if node.repartition:
                topics.append(
                    InternalTopic(name=self._repartition_topic(node.id), kind="repartition", node_id=node.id)
                )
            if node.kind in STATEFUL_KINDS:
                topics.append(
                    InternalTopic(
                        name=self._changelog_topic(node.id), kind="changelog", node_id=node.id, compacted=True
                    )
                )
        topics.append(InternalTopic(name=self._dead_letter_topic, kind="dead_letter"))
        topics.append(InternalTopic(name=self._late_topic, kind="late"))
        return topics

    def _repartition_topic(self, node_id: str) -> str:
        return f"{self._name}.{node_id}.repartition"

    def _changelog_topic(self, node_id: str) -> str:
        return f"{self._name}.{node_id}.changelog"

    def _graph(self, nodes: list[_Node], consumers: dict[tuple[str, int], list[str]]) -> PipelineGraph:
        specs: list[NodeSpec] = []
        edges: list[EdgeSpec] = []
        for node in nodes:
            downstream = [c for port in range(node.ports) for c in consumers.get((node.id, port), [])]
            specs.append(
                NodeSpec(
                    id=node.id,
                    kind=node.kind,
                    name=node.name,
                    upstream=[upstream_id for upstream_id, _ in node.inputs],
                    downstream=list(dict.fromkeys(downstream)),
                    parameters=dict(node.parameters),
                    keyed=node.keyed,
                    stateful=node.kind in STATEFUL_KINDS,
                    repartition_topic=self._repartition_topic(node.id) if node.repartition else None,
                    changelog_topic=self._changelog_topic(node.id) if node.kind in STATEFUL_KINDS else None,
                )
            )
            edges.extend(
                EdgeSpec(source=upstream_id, target=node.id, port=port, input=index)
                for index, (upstream_id, port) in enumerate(node.inputs)
            )
        sources = [str(n.parameters["topic"]) for n in nodes if n.kind == "source"]
        sinks = list(dict.fromkeys(str(n.parameters["topic"]) for n in nodes if n.kind == "sink"))
        return PipelineGraph(
            name=self._name,
            tenant=self._tenant,
            tenant_weight=self._tenant_weight,
            latency_target_s=self._latency_target_s,
            dead_letter_topic=self._dead_letter_topic,
            late_topic=self._late_topic,
            on_error=self._on_error,
            nodes=specs,
            edges=edges,
            source_topics=sources,
            sink_topics=sinks,
            internal_topics=self._internal_topics(nodes),
            functions={node.id: node.functions for node in nodes},
            spark_stages=[
                spec.model_copy(update={"hops": self._depth(self._nodes[spec.input_node].inputs[0][0])})
                for spec, _ in self._spark_stages
            ],
            spark_functions={spec.id: functions for spec, functions in self._spark_stages},
        )

    def _depth(self, node_id: str) -> int:
        """Steps on the longest path from a source to ``node_id``, both included (a source is 1)."""
        depth: dict[str, int] = {}
        for node in self._nodes.values():  # declaration order is topological
            depth[node.id] = 1 + max((depth[upstream] for upstream, _ in node.inputs), default=0)
            if node.id == node_id:
                break
        return depth[node_id]

    def _input_model(self, step: str) -> type[BaseModel] | None:
        """The value model records have at ``step``, when only type-keeping steps follow a typed source."""
        node = self._nodes[step]
        while node.kind in ("filter", "key_by", "branch"):
            node = self._nodes[node.inputs[0][0]]
        return node.functions.value_model if node.kind == "source" else None

    def _add_spark_stage(self, spec: SparkStageSpec, functions: SparkStageFunctions) -> None:
        self._spark_stages.append((spec, functions))

    # --- helpers used by Stream -------------------------------------------------------------

    def _error(self, problem: str, step: str | None = None) -> PipelineDefinitionError:
        return PipelineDefinitionError(problem, pipeline=self._name, step=step)

    def _next_step_id(self, label: str) -> str:
        """The id the next step added with ``label`` gets (to name it in an error raised before it is)."""
        return f"{len(self._nodes) + 1}-{label}"

    def _add(
        self,
        kind: NodeKind,
        label: str,
        name: str,
        inputs: tuple[tuple[str, int], ...],
        *,
        parameters: dict[str, JsonValue],
        functions: NodeFunctions,
        keyed: bool,
        ports: int = 1,
        repartition: bool = False,
    ) -> str:
        """Append a step and return its id, ``<position>-<label>`` (``2-filter``), unique in the pipeline.

        Refuses, naming the new step, a step no worker could run where it is (a key_by after a join...,
        see :func:`~cadenza.pipelines.graph.unsupported_by_worker`).
        """
        node_id = self._next_step_id(label)
        problem = self._unsupported(kind, parameters, [upstream for upstream, _ in inputs])
        if problem is not None:
            raise self._error(problem, node_id)
        self._nodes[node_id] = _Node(
            id=node_id,
            kind=kind,
            name=name,
            inputs=inputs,
            parameters=parameters,
            functions=functions,
            keyed=keyed,
            ports=ports,
            repartition=repartition,
        )
        return node_id

    def _unsupported(self, kind: NodeKind, parameters: dict[str, JsonValue], inputs: list[str]) -> str | None:
        """Why no worker could run a ``kind`` step fed by the steps ``inputs``, or ``None``."""
        nodes = self._nodes
        return unsupported_by_worker(
            kind,
            parameters,
            inputs,
            lambda i: nodes[i].kind,
            lambda i: [upstream for upstream, _ in nodes[i].inputs],
        )

    def _node(self, node_id: str) -> _Node:
        return self._nodes[node_id]

    def _open_window(self, step: str, spec: str) -> _OpenWindow:
        window = _OpenWindow(step=step, spec=spec)
        self._open_windows.append(window)
        return window

    def _topic(self, topic: object, *, what: str, step: str | None = None) -> str:
        problem = name_problem(topic, what=what)
        if problem is not None:
            raise self._error(problem, step)
        assert isinstance(topic, str)
        return topic

    def _codec(self, format: object, codec: object, step: str) -> tuple[str, Codec | None]:
        """The format name a topic's values are described by, and the user's codec (``None``: the
        built-in codec the name stands for, chosen by the worker)."""
        if codec is None:
            if format is None:
                return "json", None
            if format not in _FORMATS:
                raise self._error(
                    f"format must be one of {', '.join(_FORMATS)} (or pass codec=...), got {format!r}", step
                )
            return str(format), None
        if format is not None:
            raise self._error("give format= or codec=, not both", step)
        from cadenza.schemas.value_codec import codec_problem  # noqa: PLC0415 - only user codecs need it

        problem = codec_problem(codec)
        if problem is not None:
            raise self._error(problem, step)
        return str(codec.name), cast("Codec", codec)  # type: ignore[attr-defined]

    def _duration(self, value: str | float | timedelta, what: str, step: str) -> float:
        try:
            return parse_duration(value, what=what)
        except ValueError as exc:
            raise self._error(str(exc), step) from None


def _field_getter(name: str) -> Callable[[Any], Any]:
    """Event time from a field of a model, or a key of a raw (dict) JSON value."""

    def get(value: Any) -> Any:
        return value[name] if isinstance(value, dict) else getattr(value, name)

    get.__name__ = f"field_{name}"
    return get
