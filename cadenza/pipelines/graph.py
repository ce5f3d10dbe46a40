"""The compiled form of a pipeline: a validated DAG that workers, the scheduler and the CLI consume.

It is split in two on purpose. Everything that can be written down (steps, topics, window specs,
durations in seconds) is plain pydantic data, so a graph can be logged, shipped as JSON, compared
between versions and rebuilt with ``PipelineGraph.model_validate_json``. The user's code (functions,
value models) cannot be serialized, so it rides along in :attr:`PipelineGraph.functions`, a side table
keyed by node id that serialization leaves out; a worker that imported the user's module gets it from
``Pipeline.compile()``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, InstanceOf, JsonValue, model_validator
from pydantic.json_schema import SkipJsonSchema

from cadenza.pipelines.errors import PipelineDefinitionError
from cadenza.pipelines.window_specs import WINDOW_SPEC_ADAPTER, Hopping, Session, Sliding, Tumbling

if TYPE_CHECKING:
    from cadenza.schemas.value_codec import Codec

NodeKind: TypeAlias = Literal[
    "source", "map", "filter", "flat_map", "key_by", "window_aggregate", "join", "process", "branch", "sink"
]
TopicFormat: TypeAlias = Literal["json", "avro"]
InternalTopicKind: TypeAlias = Literal["repartition", "changelog", "dead_letter", "late"]
OnError: TypeAlias = Literal["dead_letter", "stop"]
"""What a worker does when a user function raises: dead-letter the record and go on, or stop the pipeline."""

STATEFUL_KINDS: frozenset[str] = frozenset({"window_aggregate", "join", "process"})
"""Node kinds that keep keyed state, and so get a changelog topic."""

_MIX_JOIN_INPUTS: dict[str, str] = {
    "key_by": "key_by",
    "window_aggregate": "window",
    "join": "join",
    "process": "process",
}
"""Kinds the worker cannot run after a join (see :func:`unsupported_by_worker`), as messages name them."""
PASS_THROUGH_KINDS: frozenset[str] = frozenset({"map", "filter", "flat_map", "branch"})
"""Kinds that hand a record's window and event time on to the next step unchanged (a key_by or a
join drops the window; a window aggregate, a join or a process step emits new event times)."""


@dataclass(frozen=True)
class NodeFunctions:
    """The user code of one node; which fields are set depends on the node's kind.

    - ``source``: ``value_model`` (a pydantic class, or ``None`` for a raw payload), ``key_model`` (a
      pydantic class, ``str``, ``bytes``, or ``None`` for an unkeyed source) and
      ``timestamp`` (returns the record's event time, taken as is from the user's field or function;
      ``None`` means "use the Kafka record timestamp").
    - ``map``, ``filter``, ``flat_map``, ``key_by``: ``fn``, called with the record value.
    - ``window_aggregate``: every aggregation, built-in or not, comes as ``init() -> acc``,
      ``add(acc, value) -> acc``, ``merge(acc, acc) -> acc`` (``None`` only for a user ``aggregate``
      without one, which non-session windows do not need) and ``result(acc) -> output``, so one
      generic operator runs them all (the built-ins are :mod:`cadenza.operators.aggregations`'
      aggregators); ``fn`` is the user's extractor for sum/min/max/mean.
    - ``join``: ``on(left, right) -> bool``, an extra match condition on top of equal keys, or ``None``;
      ``fn``: the joiner, ``fn(left, right) -> value`` (``None``: the tuple ``(left, right)``).
    - ``process``: ``fn``, the processor factory (a :class:`~cadenza.pipelines.Processor` subclass or
      a callable returning a fresh processor), called once per input partition.
    - ``branch``: ``predicates``, one per output port, tried in order; a record goes to the first
      port whose predicate holds and is dropped when none does.
    - ``source`` and ``sink``: ``codec``, the user's value codec, or ``None`` for the built-in codec
      the ``format`` parameter names.
    """

    fn: Callable[..., Any] | None = None
    predicates: tuple[Callable[[Any], bool], ...] = ()
    on: Callable[[Any, Any], bool] | None = None
    timestamp: Callable[[Any], Any] | None = None
    value_model: type[BaseModel] | None = None
    key_model: type[BaseModel] | type[str] | type[bytes] | None = None
    init: Callable[[], Any] | None = None
    add: Callable[[Any, Any], Any] | None = None
    merge: Callable[[Any, Any], Any] | None = None
    result: Callable[[Any], Any] | None = None
    codec: Codec | None = None


# The graph models are built with ``defer_build``: their validators come with the first compile(),
# not with ``import cadenza`` (a module that only declares pipelines never pays for them).


class NodeSpec(BaseModel):
    """One step of a pipeline.

    ``upstream`` has one entry per input, in input order (for a join: left, then right), so it may
    repeat an id when both inputs come from two ports of the same branch; ``downstream`` lists each
    consumer once. The edges say which output port feeds which input.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    id: str
    kind: NodeKind
    name: str
    upstream: list[str] = Field(default_factory=list)
    downstream: list[str] = Field(default_factory=list)
    parameters: dict[str, JsonValue] = Field(default_factory=dict)
    keyed: bool = False
    stateful: bool = False
    repartition_topic: str | None = None
    changelog_topic: str | None = None

    def window_spec(self) -> Tumbling | Hopping | Sliding | Session | None:
        """The typed window spec of a window aggregate (stored as JSON in ``parameters``), else None."""
        raw = self.parameters.get("window")
        return None if raw is None else WINDOW_SPEC_ADAPTER.validate_python(raw)


class EdgeSpec(BaseModel):
    """A record channel from ``source``'s output ``port`` to ``target``'s input number ``input``.

    Ports only matter for branches (port i carries records that matched predicate i); inputs only
    for joins (0 is the left side, 1 the right).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    source: str
    target: str
    port: int = 0
    input: int = 0


class InternalTopic(BaseModel):
    """A topic cadenza creates and owns for a pipeline; ``compacted`` topics need cleanup.policy=compact."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    name: str
    kind: InternalTopicKind
    node_id: str | None = None
    compacted: bool = False


SparkOutputMode: TypeAlias = Literal["append", "update"]


@dataclass(frozen=True)
class SparkStageFunctions:
    """The user code of a Spark stage: the DataFrame transform, and the models on either side.

    ``input_model`` gives the Spark schema the stage-input JSON is parsed with; ``value_model`` is
    what the result source decodes into (it is also on that source node's :class:`NodeFunctions`).
    """

    transform: Callable[[Any], Any]
    input_model: type[BaseModel] | None = None
    value_model: type[BaseModel] | None = None


class SparkStageSpec(BaseModel):
    """A step handed to Spark: the worker writes ``input_topic``, Spark reads it and writes ``output_topic``.

    The worker needs nothing special for it: ``input_node`` is an ordinary JSON sink (into the
    stage-input topic) and ``output_node`` an ordinary source (of the result topic). ``cadenza
    spark-stage`` runs the Structured Streaming query between the two and stamps every result with a
    scheduling context (this pipeline's tenant and latency target) so downstream deadlines hold.
    ``hops`` is how many steps precede the stage on the longest path from a source; a result's context
    gets the input's hop count + 1 (this + 1 when the transform dropped the per-record count).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    id: str
    name: str
    pipeline: str
    tenant: str
    latency_target_s: float
    input_topic: str
    output_topic: str
    input_node: str
    output_node: str
    transform: str
    input_model: str | None = None
    value_model: str | None = None
    event_time_field: str | None = None
    watermark_s: float | None = None
    output_mode: SparkOutputMode = "append"
    hops: int = 0


class PipelineGraph(BaseModel):
    """A pipeline ready to run: validated, acyclic, every path ending in a sink.

    Durations are float seconds. ``nodes`` are in declaration order, which is also a topological
    order; :meth:`topological_order` computes one from the edges for graphs built by other means.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    name: str
    tenant: str
    tenant_weight: float
    latency_target_s: float
    dead_letter_topic: str
    late_topic: str
    # Left out of the JSON at its default, so graphs serialized before it existed read back the same.
    on_error: OnError = Field(default="dead_letter", exclude_if=lambda mode: mode == "dead_letter")
    nodes: list[NodeSpec]
    edges: list[EdgeSpec]
    source_topics: list[str]
    sink_topics: list[str]
    internal_topics: list[InternalTopic]
    functions: SkipJsonSchema[dict[str, InstanceOf[NodeFunctions]]] = Field(
        default_factory=dict, exclude=True, repr=False
    )
    # Left out of the JSON when empty, so graphs without Spark stages serialize as before.
    spark_stages: list[SparkStageSpec] = Field(default_factory=list, exclude_if=lambda stages: not stages)
    spark_functions: SkipJsonSchema[dict[str, InstanceOf[SparkStageFunctions]]] = Field(
        default_factory=dict, exclude=True, repr=False
    )

    @model_validator(mode="after")
    def _check_structure(self) -> PipelineGraph:
        # Compiled graphs pass by construction; this guards graphs read back from JSON or built by hand,
        # which a worker would otherwise run into an infinite loop or a KeyError.
        ids = [node.id for node in self.nodes]
        duplicates = sorted({i for i in ids if ids.count(i) > 1})
        if duplicates:
            raise PipelineDefinitionError(f"duplicate step ids {duplicates}", pipeline=self.name)
        known = set(ids)
        for edge in self.edges:
            for end in (edge.source, edge.target):
                if end not in known:
                    raise PipelineDefinitionError(
                        f"edge {edge.source} -> {edge.target} refers to an unknown step",
                        pipeline=self.name,
                        step=end,
                    )
        for node in self.nodes:
            incoming = sorted((e for e in self.edges if e.target == node.id), key=lambda e: e.input)
            outgoing = list(dict.fromkeys(e.target for e in self.edges if e.source == node.id))
            if [e.source for e in incoming] != node.upstream or sorted(outgoing) != sorted(node.downstream):
                raise PipelineDefinitionError(
                    "upstream/downstream ids do not match the edges", pipeline=self.name, step=node.id
                )
        order = self.topological_order()
        nodes = {node.id: node for node in self.nodes}
        for node_id in order:
            node = nodes[node_id]
            problem = unsupported_by_worker(
                node.kind,
                node.parameters,
                node.upstream,
                lambda i: nodes[i].kind,
                lambda i: nodes[i].upstream,
            )
            if problem is not None:
                raise PipelineDefinitionError(problem, pipeline=self.name, step=node_id)
        kinds = {node.id: node.kind for node in self.nodes}
        for stage in self.spark_stages:
            if kinds.get(stage.input_node) != "sink" or kinds.get(stage.output_node) != "source":
                raise PipelineDefinitionError(
                    f"Spark stage {stage.id!r} must write through a sink step and be read by a source step",
                    pipeline=self.name,
                    step=stage.input_node,
                )
        return self

    def spark_stage(self, stage_id: str) -> SparkStageSpec:
        """The Spark stage with this id; ``KeyError`` if there is none."""
        for stage in self.spark_stages:
            if stage.id == stage_id:
                return stage
        raise KeyError(f"pipeline {self.name!r} has no Spark stage {stage_id!r}")

    def node(self, node_id: str) -> NodeSpec:
        """The node with this id; ``KeyError`` if there is none."""
        for node in self.nodes:
            if node.id == node_id:
                return node
        raise KeyError(f"pipeline {self.name!r} has no step {node_id!r}")

    def downstream(self, node_id: str) -> list[str]:
        """Ids of the nodes that consume ``node_id``'s output, each once."""
        return list(self.node(node_id).downstream)

    def upstream(self, node_id: str) -> list[str]:
        """Ids of the nodes feeding ``node_id``, one per input (left then right for a join)."""
        return list(self.node(node_id).upstream)

    @property
    def internal_topic_names(self) -> list[str]:
        return [topic.name for topic in self.internal_topics]

    def topological_order(self) -> list[str]:
        """Node ids with every node after all of its upstreams; ties keep declaration order.

        Path costs (own cost + the costliest downstream path) are computed by walking this list
        backwards. Raises :class:`PipelineDefinitionError` naming the steps of a cycle, if any.
        """
        position = {node.id: index for index, node in enumerate(self.nodes)}
        pending_inputs = {node.id: 0 for node in self.nodes}
        consumers: dict[str, list[str]] = {node.id: [] for node in self.nodes}
        producers: dict[str, list[str]] = {node.id: [] for node in self.nodes}
        for edge in self.edges:
            pending_inputs[edge.target] += 1
            consumers[edge.source].append(edge.target)
            producers[edge.target].append(edge.source)
        ready = sorted((i for i, n in pending_inputs.items() if n == 0), key=position.__getitem__)
        order: list[str] = []
        while ready:
            current = ready.pop(0)
            order.append(current)
            for target in consumers[current]:
                pending_inputs[target] -= 1
                if pending_inputs[target] == 0:
                    ready.append(target)
            ready.sort(key=position.__getitem__)
        if len(order) < len(self.nodes):
            cycle = _find_cycle({i for i, n in pending_inputs.items() if n > 0}, producers, position)
            raise PipelineDefinitionError(
                f"cycle through steps {' -> '.join(cycle)}; a pipeline must be a DAG",
                pipeline=self.name,
                step=cycle[0],
            )
        return order


def unsupported_by_worker(
    kind: str,
    parameters: Mapping[str, JsonValue],
    inputs: Sequence[str],
    kind_of: Callable[[str], str],
    upstream_of: Callable[[str], Sequence[str]],
) -> str | None:
    """Why a worker cannot run a step of ``kind`` fed by the steps ``inputs``, or ``None`` if it can.

    The one place these rules live: :class:`~cadenza.pipelines.Pipeline` asks as each step is declared
    (so the traceback points at the user's line) and :class:`PipelineGraph` for every step of a graph
    read back from JSON or built by hand, so a worker never receives a graph that breaks them.
    ``kind_of`` and ``upstream_of`` describe the steps already there (by id).

    - A join's output runs in the sub-topologies of both of its inputs (records arrive from two
      topics), so what follows it up to its sinks must not depend on which input partition and offset
      a record came from: a window or another join there would mix the two inputs' offsets in one
      position, a key_by their origins in one repartition topic.
    - A sink fed window results writes them as the JSON envelope of :mod:`cadenza.worker.engine.wire` (the
      window rides beside the value through map, filter, flat_map and branch), so it cannot be Avro.
      A key_by or a join after the window drops the window, and a sink after those may be Avro.
    """
    what = _MIX_JOIN_INPUTS.get(kind)
    if what is not None:
        join = _nearest_upstream(inputs, "join", None, kind_of, upstream_of)
        if join is not None:
            return (
                f"a {what} after the join {join!r} is not supported by the worker yet; put a sink after the "
                "join and read that topic in another pipeline"
            )
    if kind == "sink" and parameters.get("format") == "avro":
        window = _nearest_upstream(inputs, "window_aggregate", PASS_THROUGH_KINDS, kind_of, upstream_of)
        if window is not None:
            return (
                f"an Avro sink after the window aggregate {window!r} is not supported yet (window results "
                "are written as JSON with their window bounds); use format='json'"
            )
    return None


def _nearest_upstream(
    start: Sequence[str],
    wanted: str,
    through: frozenset[str] | None,
    kind_of: Callable[[str], str],
    upstream_of: Callable[[str], Sequence[str]],
) -> str | None:
    """The nearest step of kind ``wanted`` at or upstream of the steps ``start``, walking up only
    through steps of the kinds ``through`` (any kind when ``None``)."""
    queue = deque(start)
    seen: set[str] = set()
    while queue:
        current = queue.popleft()
        if current in seen:
            continue
        seen.add(current)
        kind = kind_of(current)
        if kind == wanted:
            return current
        if through is None or kind in through:
            queue.extend(upstream_of(current))
    return None


def _find_cycle(remaining: set[str], producers: dict[str, list[str]], position: dict[str, int]) -> list[str]:
    """One cycle among the nodes Kahn's algorithm could not order, as ids with the first repeated last.

    Each such node has at least one unordered upstream (that is why it stayed), so walking upstream
    inside ``remaining`` never gets stuck and must come back to a node already on the path. (Walking
    downstream could dead-end in a node that merely hangs off a cycle.)
    """
    current = min(remaining, key=position.__getitem__)
    path: list[str] = []
    seen: dict[str, int] = {}
    while current not in seen:
        seen[current] = len(path)
        path.append(current)
        current = min((p for p in producers[current] if p in remaining), key=position.__getitem__)
    cycle = path[seen[current] :]
    cycle.reverse()
    first = cycle.index(min(cycle, key=position.__getitem__))  # start where the user's code does
    cycle = cycle[first:] + cycle[:first]
    return [*cycle, cycle[0]]
