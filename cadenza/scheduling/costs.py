"""Per-operator run-time estimates and the path costs (``C_path``) derived from them.

A path cost is the time from an operator to the sink, so besides run times it counts the *hop*
into each operator reached through Kafka (a repartition topic): a produce, the broker and a fetch,
tens to hundreds of milliseconds that no operator's run time contains. Without it a record upstream
of a repartition that the scheduler runs just in time is late downstream by the hop.

Cost-aware policies stamp ``C_path`` of the receiving operator into every context they build, so the
lookup must be a couple of dict reads. Path costs are therefore cached per pipeline and refreshed
incrementally: when an operator's estimate moves, only that operator and its ancestors are
recomputed, in reverse topological order, and the walk stops where a value does not change.

Not thread-safe: the executor thread owns the model. Feedback consumed elsewhere should be handed to
the executor thread (e.g. through a queue) and applied there.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from cadenza.errors import ConfigError

__all__ = ["DEFAULT_OPERATOR_COST", "CostModel"]

DEFAULT_OPERATOR_COST = 1e-3
"""Seconds assumed per record for an operator never measured: pessimistic for most Python operators,
so a new pipeline's deadlines are not computed from an optimistic zero."""

_INF = math.inf


@dataclass(slots=True)
class _PipelineGraph:
    estimate: dict[str, float] = field(default_factory=dict)
    # The estimate each path cost was last computed from; differs from ``estimate`` by less than the
    # recompute tolerance, which is what spares a DAG walk per record.
    used: dict[str, float] = field(default_factory=dict)
    # Seconds for a record to reach the operator from upstream through Kafka; 0 when not measured.
    hop: dict[str, float] = field(default_factory=dict)
    down: dict[str, dict[str, None]] = field(default_factory=dict)  # dicts as insertion-ordered sets
    up: dict[str, dict[str, None]] = field(default_factory=dict)
    path: dict[str, float] = field(default_factory=dict)
    index: dict[str, int] = field(default_factory=dict)  # position in a topological order
    roots: list[str] = field(default_factory=list)


class CostModel:
    """Moving estimates of per-record run time per (pipeline, operator), and path costs over each DAG.

    ``alpha`` is the EWMA weight of a new observation. ``recompute_tolerance`` is the relative drift
    of an estimate that triggers recomputing path costs; EWMA estimates change on every observation,
    and path costs are estimates too, so following each tiny wobble would cost a DAG walk per record
    for no change in ordering. Use 0 to recompute on every change.
    """

    __slots__ = ("_alpha", "_default", "_graphs", "_tolerance")

    def __init__(
        self,
        default_cost: float = DEFAULT_OPERATOR_COST,
        alpha: float = 0.2,
        recompute_tolerance: float = 0.01,
    ) -> None:
        if not (0.0 <= default_cost < _INF):
            raise ConfigError(
                f"default operator cost must be finite, non-negative seconds, got {default_cost!r}"
            )
        if not (0.0 < alpha <= 1.0):
            raise ConfigError(f"cost model alpha must be in (0, 1], got {alpha!r}")
        if not (0.0 <= recompute_tolerance < _INF):
            raise ConfigError(
                f"recompute_tolerance must be finite and non-negative, got {recompute_tolerance!r}"
            )
        self._default = float(default_cost)
        self._alpha = float(alpha)
        self._tolerance = float(recompute_tolerance)
        self._graphs: dict[str, _PipelineGraph] = {}

    @property
    def default_cost(self) -> float:
        return self._default

    @property
    def alpha(self) -> float:
        return self._alpha

    @property
    def recompute_tolerance(self) -> float:
        """Path costs carry an estimate as of its last drift beyond this share, so they may differ
        from :meth:`estimate` by up to it."""
        return self._tolerance

    # -- structure -------------------------------------------------------------------------------

    def add_pipeline(self, pipeline_id: str, edges: Mapping[str, Iterable[str]]) -> None:
        """Register a pipeline's operators and their downstream edges, e.g. ``{"src": ["map"], "map": []}``.

        Operators that appear only as a downstream are registered too. May be called again to add
        operators and edges; a cycle is refused with :class:`ConfigError` and leaves the model as it was.
        """
        graph = self._graphs.get(pipeline_id)
        pending = _PipelineGraph() if graph is None else _copy_structure(graph)
        for upstream, downstreams in edges.items():
            self._add_node(pending, upstream)
            for downstream in downstreams:
                self._add_node(pending, downstream)
                pending.down[upstream][downstream] = None
                pending.up[downstream][upstream] = None
        self._rebuild(pipeline_id, pending)

    def add_operator(self, pipeline_id: str, operator_id: str, downstream: Iterable[str] = ()) -> None:
        self.add_pipeline(pipeline_id, {operator_id: list(downstream)})

    def add_edge(self, pipeline_id: str, upstream: str, downstream: str) -> None:
        self.add_pipeline(pipeline_id, {upstream: [downstream]})

    def remove_pipeline(self, pipeline_id: str) -> None:
        self._graphs.pop(pipeline_id, None)

    def pipelines(self) -> list[str]:
        return list(self._graphs)

    def operators(self, pipeline_id: str) -> list[str]:
        """The pipeline's operators in topological order (sources first)."""
        graph = self._graphs.get(pipeline_id)
        return [] if graph is None else sorted(graph.index, key=graph.index.__getitem__)

    def downstream(self, pipeline_id: str, operator_id: str) -> list[str]:
        graph = self._graphs.get(pipeline_id)
        if graph is None or operator_id not in graph.down:
            return []
        return list(graph.down[operator_id])

    def sources(self, pipeline_id: str) -> list[str]:
        graph = self._graphs.get(pipeline_id)
        return [] if graph is None else list(graph.roots)

    # -- reading ---------------------------------------------------------------------------------

    def estimate(self, pipeline_id: str, operator_id: str) -> float:
        """Current per-record run-time estimate, or the default for an operator never seen."""
        graph = self._graphs.get(pipeline_id)
        return self._default if graph is None else graph.estimate.get(operator_id, self._default)

    def hop(self, pipeline_id: str, operator_id: str) -> float:
        """Seconds a record takes to reach the operator from upstream (see :meth:`set_hop`)."""
        graph = self._graphs.get(pipeline_id)
        return 0.0 if graph is None else graph.hop.get(operator_id, 0.0)

    def path_cost(self, pipeline_id: str, operator_id: str) -> float:
        """``C_path``: own cost plus the largest, over downstream operators, of the hop into one and
        its path cost (cached)."""
        graph = self._graphs.get(pipeline_id)
        return self._default if graph is None else graph.path.get(operator_id, self._default)

    def source_path_cost(self, pipeline_id: str) -> float:
        """The largest path cost from any of the pipeline's sources: the cost a new record faces."""
        graph = self._graphs.get(pipeline_id)
        if graph is None or not graph.roots:
            return self._default
        path = graph.path
        return max(path[root] for root in graph.roots)

    # -- learning --------------------------------------------------------------------------------

    def observe(self, pipeline_id: str, operator_id: str, run_time: float) -> None:
        """Fold one in-process measurement into the operator's EWMA; bad values are ignored.

        Ignored rather than raised: a clock step can produce a negative or absurd duration, and a
        measurement must never take the executor down.
        """
        if not (0.0 <= run_time < _INF):
            return
        graph = self._graph_with(pipeline_id, operator_id)
        old = graph.estimate[operator_id]
        self._set(graph, operator_id, old + self._alpha * (run_time - old))

    def apply_feedback(self, pipeline_id: str, operator_id: str, run_time: float, count: int) -> bool:
        """Blend a statistic computed elsewhere (mean or p95 over ``count`` records) into the estimate.

        The blend weight is that of ``count`` EWMA observations of the same value,
        ``1 - (1 - alpha) ** count``, so a large sample all but replaces the estimate while a handful
        of records only nudges it. Returns whether the feedback was used: values that are not finite
        and non-negative, and non-positive counts, are ignored (they come off the network).
        """
        if (
            not (0.0 <= run_time < _INF)
            or isinstance(count, bool)
            or not isinstance(count, int)
            or count <= 0
        ):
            return False
        graph = self._graph_with(pipeline_id, operator_id)
        old = graph.estimate[operator_id]
        weight = 1.0 - (1.0 - self._alpha) ** count
        self._set(graph, operator_id, old + weight * (run_time - old))
        return True

    def set_estimate(self, pipeline_id: str, operator_id: str, run_time: float) -> None:
        """Overwrite an estimate, e.g. from configuration or a previous run's statistics."""
        if not (0.0 <= run_time < _INF):
            raise ValueError(f"run time estimate must be finite and non-negative, got {run_time!r}")
        graph = self._graph_with(pipeline_id, operator_id)
        graph.estimate[operator_id] = run_time
        graph.used[operator_id] = run_time
        self._propagate(graph, operator_id)

    def set_hop(self, pipeline_id: str, operator_id: str, seconds: float) -> None:
        """Set how long a record takes to reach the operator from upstream (a repartition topic's
        produce, broker and fetch); the path costs of the operators upstream of it grow by it.

        Set from the latency the worker measures where it reads the topic
        (:class:`~cadenza.worker.tuning.hop_estimates.HopEstimates`), not learned here: which quantile of
        a hop to plan with is the reader's choice.
        """
        if not (0.0 <= seconds < _INF):
            raise ValueError(f"a hop must be finite and non-negative seconds, got {seconds!r}")
        graph = self._graph_with(pipeline_id, operator_id)
        if graph.hop[operator_id] != seconds:
            graph.hop[operator_id] = seconds
            self._propagate(graph, operator_id)

    # -- internals -------------------------------------------------------------------------------

    def _graph_with(self, pipeline_id: str, operator_id: str) -> _PipelineGraph:
        """The pipeline's graph, the operator registered in it first if it is new (statistics for an
        operator of another process, say)."""
        graph = self._graphs.get(pipeline_id)
        if graph is None or operator_id not in graph.estimate:
            self.add_operator(pipeline_id, operator_id)
            graph = self._graphs[pipeline_id]
        return graph

    def _add_node(self, graph: _PipelineGraph, operator_id: str) -> None:
        if operator_id not in graph.estimate:
            graph.estimate[operator_id] = self._default
            graph.used[operator_id] = self._default
            graph.hop[operator_id] = 0.0
            graph.down[operator_id] = {}
            graph.up[operator_id] = {}

    def _rebuild(self, pipeline_id: str, graph: _PipelineGraph) -> None:
        # Kahn's algorithm, in insertion order so that the order (and error messages) are deterministic.
        indegree = {op: len(ups) for op, ups in graph.up.items()}
        ready = deque(op for op, n in indegree.items() if n == 0)
        order: list[str] = []
        while ready:
            op = ready.popleft()
            order.append(op)
            for child in graph.down[op]:
                indegree[child] -= 1
                if indegree[child] == 0:
                    ready.append(child)
        if len(order) != len(indegree):
            cyclic = sorted(op for op, n in indegree.items() if n > 0)
            raise ConfigError(
                f"pipeline {pipeline_id!r}: operators {cyclic} form a cycle; a pipeline must be a DAG"
            )
        graph.index = {op: i for i, op in enumerate(order)}
        graph.roots = [op for op in order if not graph.up[op]]
        path, hop = graph.path, graph.hop
        path.clear()
        for op in reversed(order):
            children = graph.down[op]
            graph.used[op] = graph.estimate[op]
            path[op] = graph.estimate[op] + (max(hop[c] + path[c] for c in children) if children else 0.0)
        self._graphs[pipeline_id] = graph

    def _set(self, graph: _PipelineGraph, operator_id: str, value: float) -> None:
        graph.estimate[operator_id] = value
        used = graph.used[operator_id]
        if abs(value - used) > self._tolerance * used:
            graph.used[operator_id] = value
            self._propagate(graph, operator_id)

    def _propagate(self, graph: _PipelineGraph, start: str) -> None:
        # Reverse topological order guarantees each ancestor is recomputed once, after all of its
        # children that could change; unchanged values stop the walk (``start`` always goes on: its
        # hop, which its parents' values count, may be what changed).
        index = graph.index
        down, up, used, path, hop = graph.down, graph.up, graph.used, graph.path, graph.hop
        todo = [(-index[start], start)]
        queued = {start}
        while todo:
            _, op = heapq.heappop(todo)
            children = down[op]
            value = used[op] + (max(hop[c] + path[c] for c in children) if children else 0.0)
            if value == path[op] and op != start:
                continue
            path[op] = value
            for parent in up[op]:
                if parent not in queued:
                    queued.add(parent)
                    heapq.heappush(todo, (-index[parent], parent))

    def __repr__(self) -> str:
        return (
            f"CostModel(default_cost={self._default!r}, alpha={self._alpha!r}, "
            f"pipelines={sorted(self._graphs)!r})"
        )


def _copy_structure(graph: _PipelineGraph) -> _PipelineGraph:
    """A copy to mutate, so a refused edge (cycle) leaves the registered graph untouched."""
    return _PipelineGraph(
        estimate=dict(graph.estimate),
        used=dict(graph.used),
        hop=dict(graph.hop),
        down={op: dict(children) for op, children in graph.down.items()},
        up={op: dict(parents) for op, parents in graph.up.items()},
        path=dict(graph.path),
        index=dict(graph.index),
        roots=list(graph.roots),
    )
