"""The scheduling-policy interface (Cameo's hooks) and the small carriers passed through it.

The scheduler is policy-agnostic: it only asks a policy for a sortable priority of a record's context.
Everything a policy needs to remember (cost estimates, per-tenant service) it keeps itself and learns
through the hooks, which the worker calls at fixed points: when a record enters from a source, when an
operator emits a record, and after an operator ran (the reply). That split is what lets user policies
be dropped in by import path without touching the worker.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, TypeAlias

from cadenza.scheduling.context import SchedulingContext, new_trace_id
from cadenza.scheduling.costs import CostModel

__all__ = [
    "HOOKS",
    "BasePolicy",
    "Measurement",
    "OperatorInfo",
    "Priority",
    "Reply",
    "SchedulingPolicy",
    "SourceRecordInfo",
]

Priority: TypeAlias = float | tuple[float, ...]
"""What the scheduler orders by; smaller runs first. Values from one policy must be mutually comparable."""

HOOKS: tuple[str, ...] = (
    "build_ctx_at_source",
    "build_ctx_at_operator",
    "prepare_reply",
    "process_ctx_from_reply",
    "priority",
)
"""The methods a policy must provide; the loader checks user classes against this list."""


@dataclass(slots=True)
class SourceRecordInfo:
    """What the fetcher knows about a record entering a pipeline from a source topic.

    ``operator_id`` names the operator that will consume the record; when omitted, policies use the
    pipeline's sources as registered in the cost model. ``window_close_time`` is set when that
    operator is windowed: the physical time at which the record's window is expected to fire (its end
    mapped to physical time, plus the allowed lateness).
    """

    pipeline_id: str
    tenant_id: str
    latency_target: float
    arrival_time: float
    offset: int
    partition: int
    operator_id: str | None = None
    window_close_time: float | None = None
    trace_id: int | None = None


@dataclass(slots=True)
class OperatorInfo:
    """The operator that will run a record whose context is being built (the receiving operator).

    Context is built for the receiver because both the path cost and the window frontier belong to
    the operator where the record will wait. ``window_close_time`` has the same meaning as in
    :class:`SourceRecordInfo`: when the output's window at this operator is expected to fire.
    """

    pipeline_id: str
    operator_id: str
    is_windowed: bool = False
    window_close_time: float | None = None


@dataclass(slots=True)
class Measurement:
    """What the executor measured when records ran at one operator.

    One measurement may cover several records run back to back (the worker sends one per quantum,
    so the reply path costs nothing per record): ``run_time`` is then their total and ``records``
    their number, and the cost per record is ``run_time / records``.
    """

    pipeline_id: str
    operator_id: str
    run_time: float
    """Seconds the operator spent on the records (busy time)."""
    queue_wait: float
    """Seconds the records waited in their operator-partition queue before they ran (mean)."""
    at: float
    """When the run finished (clock time)."""
    records: int = 1
    """How many records the measurement covers."""


@dataclass(slots=True)
class Reply:
    """The measured cost of one run, sent back upstream (in-process, or via the feedback topic)."""

    pipeline_id: str
    operator_id: str
    tenant_id: str
    run_time: float
    """Total seconds over ``records`` records."""
    queue_wait: float
    at: float
    records: int = 1


class SchedulingPolicy(ABC):
    """Cameo's policy interface: four context hooks and a priority, plus what the worker may rely on.

    Everything the worker and the scheduler need to know about a policy is declared here, with a
    default a third-party subclass inherits, so they read it directly instead of probing for it; the
    policy loader (:func:`cadenza.scheduling.get_policy`) checks a class and the object it makes
    against this contract once, at start-up
    (:func:`~cadenza.scheduling.registry.check_policy`).

    ``priority`` is called by the scheduler for head records only. If a policy's priority can change
    while a record waits (it reads ``now`` or state the replies update), it sets ``time_dependent``
    so the scheduler re-evaluates heads at each pick instead of trusting the value computed when the
    record became head. If, in addition, a waiting record's priority can only get worse (grow), never
    better, it sets ``monotone_priority`` too: the scheduler then keeps its heap and re-keys stale
    entries lazily as they reach the top (exact, since a stale key is a lower bound), instead of
    scanning every head per pick.

    ``shares_source_contexts`` declares that ``build_ctx_at_source`` depends on nothing but the
    record info (other than the trace id) and policy state that only replies change: the worker then
    builds one context for a run of records of a partition admitted together with the same arrival
    time and window close, instead of one per record, and keeps each record's own trace id beside it.
    Off by default, since a user policy may make every context differently.
    """

    name: ClassVar[str] = "custom"
    time_dependent: ClassVar[bool] = False
    monotone_priority: ClassVar[bool] = False
    shares_source_contexts: ClassVar[bool] = False
    keeps_hook_info: ClassVar[bool] = False
    """Whether the policy keeps the :class:`SourceRecordInfo` and :class:`OperatorInfo` objects its
    hooks receive beyond the call.

    By default the worker hands the hooks one info object per sub-topology and overwrites its fields
    before each call (one allocation fewer per record): a policy may read it during the call, not
    later. A policy that stores it (to batch, to log asynchronously) sets this, and gets a fresh
    object per call.
    """

    cost_model: CostModel | None = None
    """The cost model the policy learns run times into, or ``None`` if it keeps none.

    The worker registers each pipeline's DAG of sub-topologies in it at start-up (so path costs run
    over that DAG), folds the statistics of ``cadenza stats`` into it and exposes it as
    ``Worker.cost_model``. Every built-in keeps one (:class:`BasePolicy`).
    """

    @property
    def postpones_tardy(self) -> bool:
        """Whether every priority is ``d`` while ``now <= e`` and ``now + p`` after, with ``(d, e, p)``
        from :meth:`deadline_parts`: the scheduler then keeps on-time and tardy heads in two heaps
        (O(log n) per pick under overload) and never calls :meth:`priority`."""
        return False

    def deadline_parts(self, ctx: SchedulingContext) -> tuple[float, float, float]:
        """``(d, e, p)`` of a head record, for a policy that :attr:`postpones_tardy`: its deadline
        ``d``, the moment ``e >= d`` after which it is tardy, and its postponement ``p >= 0``.

        ``e`` and ``d`` differ where the order and the verdict want different deadlines: cameo
        orders by the start deadline but calls a record tardy only once its target has passed."""
        raise NotImplementedError(
            f"{type(self).__name__} does not postpone tardy records; deadline_parts is only called "
            "on a policy whose postpones_tardy is true"
        )

    def set_tenant_weights(self, weights: Mapping[str, float]) -> None:
        """Take the tenants' shares (``Pipeline(..., tenant_weight=...)``) of the pipelines it runs.

        A worker given a policy by name calls this once, after creating it and before any record,
        with every tenant of its pipelines. The default ignores them: only a policy that divides
        the executor between tenants (``fair``) has a use for them.
        """
        return None

    @abstractmethod
    def build_ctx_at_source(self, record: SourceRecordInfo) -> SchedulingContext:
        """Context for a record entering from a source topic (hops 0, a new trace id)."""

    @abstractmethod
    def build_ctx_at_operator(
        self, ctx_in: SchedulingContext, operator: OperatorInfo, output: object
    ) -> SchedulingContext:
        """Context for ``output``, emitted from a record with ``ctx_in``, to be run by ``operator``."""

    @abstractmethod
    def prepare_reply(self, ctx: SchedulingContext, measured: Measurement) -> Reply:
        """Pack what was measured when the record with ``ctx`` ran."""

    @abstractmethod
    def process_ctx_from_reply(self, reply: Reply) -> None:
        """Fold a reply into the policy's estimates."""

    @abstractmethod
    def priority(self, ctx: SchedulingContext, now: float) -> Priority:
        """Sort key of a head record; smaller runs first."""


class BasePolicy(SchedulingPolicy):
    """Shared plumbing of the built-in policies: contexts from arrival times and a cost model.

    Every built-in keeps a :class:`CostModel` fed from replies, even those that do not order by cost,
    so path costs stamped into outgoing contexts stay meaningful for a downstream process that runs a
    cost-aware policy, and so switching policy does not start from cold estimates.

    Their source contexts are functions of the record info and the cost model, so they may be
    shared (``shares_source_contexts``); a subclass whose ``build_ctx_at_source`` makes each
    context differently must set it back to ``False``.
    """

    shares_source_contexts: ClassVar[bool] = True

    cost_model: CostModel

    def __init__(self, cost_model: CostModel | None = None) -> None:
        self.cost_model = cost_model if cost_model is not None else CostModel()

    def _frontier_at_source(self, record: SourceRecordInfo) -> float:
        return record.arrival_time

    def _frontier_at_operator(self, ctx_in: SchedulingContext, operator: OperatorInfo) -> float:
        return ctx_in.frontier_time

    def _stamp(self, ctx: SchedulingContext) -> float:
        """The informational priority recorded in a new context."""
        return 0.0

    def build_ctx_at_source(self, record: SourceRecordInfo) -> SchedulingContext:
        costs = self.cost_model
        path_cost = (
            costs.source_path_cost(record.pipeline_id)
            if record.operator_id is None
            else costs.path_cost(record.pipeline_id, record.operator_id)
        )
        ctx = SchedulingContext(
            record.pipeline_id,
            record.tenant_id,
            self._frontier_at_source(record),
            record.latency_target,
            0.0,
            path_cost,
            0,
            new_trace_id() if record.trace_id is None else record.trace_id,
        )
        ctx.priority = self._stamp(ctx)
        return ctx

    def build_ctx_at_operator(
        self, ctx_in: SchedulingContext, operator: OperatorInfo, output: object
    ) -> SchedulingContext:
        ctx = SchedulingContext(
            ctx_in.pipeline_id,
            ctx_in.tenant_id,
            self._frontier_at_operator(ctx_in, operator),
            ctx_in.latency_target,
            0.0,
            self.cost_model.path_cost(operator.pipeline_id, operator.operator_id),
            ctx_in.hops + 1,
            ctx_in.trace_id,
        )
        ctx.priority = self._stamp(ctx)
        return ctx

    def prepare_reply(self, ctx: SchedulingContext, measured: Measurement) -> Reply:
        return Reply(
            measured.pipeline_id,
            measured.operator_id,
            ctx.tenant_id,
            measured.run_time,
            measured.queue_wait,
            measured.at,
            measured.records,
        )

    def process_ctx_from_reply(self, reply: Reply) -> None:
        records = reply.records
        if records == 1:
            self.cost_model.observe(reply.pipeline_id, reply.operator_id, reply.run_time)
        elif records > 1:  # weighed as that many observations of their mean
            self.cost_model.apply_feedback(
                reply.pipeline_id, reply.operator_id, reply.run_time / records, records
            )

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def frontier_with_window(frontier: float, window_close_time: float | None) -> float:
    """``t_F`` at a windowed operator: the window's close, but never before the input itself arrived.

    A record that arrives after its window's nominal close (late but within the allowed lateness)
    cannot be processed before it arrived, so its frontier is its own arrival.
    """
    if window_close_time is None or not math.isfinite(window_close_time):
        return frontier
    return window_close_time if window_close_time > frontier else frontier
