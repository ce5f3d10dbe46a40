"""Cameo's policy: least laxity first, with frontier-aware deadlines for windowed operators."""

from __future__ import annotations

from typing import ClassVar

from cadenza.scheduling.context import SchedulingContext, result_deadline, start_deadline
from cadenza.scheduling.costs import CostModel
from cadenza.scheduling.policy import BasePolicy, OperatorInfo, SourceRecordInfo, frontier_with_window

__all__ = ["CameoPolicy"]


class CameoPolicy(BasePolicy):
    """Order by the start deadline ``t_F + L - C_path(o)``.

    Subtracting the path cost makes a record that still has a long way to go start earlier than one
    about to reach its sink with the same deadline. At a windowed operator ``t_F`` is the time the
    record's window is expected to fire: a record of a window that closes in ten seconds is not
    needed before then, so it yields to records whose results are due sooner. The frontier is kept
    downstream of the window, so the window's result inherits the window's deadline.

    **Overload.** Pure deadline order fails badly once some work can no longer make its deadline
    (EDF's domino effect): a bulk tenant's burst leaves a backlog whose deadlines are already past,
    those sort before every on-time record, and so the urgent tenant misses too, for as long as the
    backlog lasts. With ``postpone_tardy`` (the default) a record whose result is already late
    (``now > t_F + L``) is *tardy*, and its deadline is postponed to one latency target from now
    (``now + L``), as a constant-bandwidth server postpones an overrunning task's deadline by a
    period. So a bulk record seconds late competes as if due seconds from now and yields to anything
    due sooner, and the executor stays work-conserving: tardy work runs whenever nothing due sooner
    waits, so throughput does not change. ``postpone_tardy=False`` gives Cameo's plain order.

    A record past its start deadline but not yet late keeps its start deadline, which is in the past,
    so it runs before everything on time. Its result may still make the target: the path cost is
    planned at the tail (a repartition hop at its p99), so the start deadline is what the record
    needs in a bad case, not what it will surely miss. Calling it tardy there gave it away to bulk
    work due within ``L`` (S1 at 90% load, 2026-12-01: LS waited 0.6-0.8 s at p99 in the scheduler
    under cameo, and 2 ms under edf, where nothing is postponed, in two repetitions of three).

    Among tardy records the tighter target goes first (``now`` is common to all of them), which
    under sustained overload of two tenants at once favours the tighter one; ``fair`` is the policy
    that guarantees every tenant a share.
    """

    name = "cameo"
    # With postponement a head's priority depends on ``now`` and only ever grows (constant while on
    # time, then ``now + L``), so the scheduler keeps its heap and re-keys stale tops lazily.
    time_dependent: ClassVar[bool] = True
    monotone_priority: ClassVar[bool] = True

    def __init__(self, cost_model: CostModel | None = None, *, postpone_tardy: bool = True) -> None:
        super().__init__(cost_model)
        self.postpone_tardy = postpone_tardy

    def _frontier_at_source(self, record: SourceRecordInfo) -> float:
        return frontier_with_window(record.arrival_time, record.window_close_time)

    def _frontier_at_operator(self, ctx_in: SchedulingContext, operator: OperatorInfo) -> float:
        if operator.is_windowed:
            return frontier_with_window(ctx_in.frontier_time, operator.window_close_time)
        return ctx_in.frontier_time

    def _stamp(self, ctx: SchedulingContext) -> float:
        return start_deadline(ctx)

    @property
    def postpones_tardy(self) -> bool:
        """Whether priorities have the shape of :meth:`deadline_parts` (the scheduler's two-heap mode).

        Not for a subclass that orders by a :meth:`priority` of its own: the scheduler then asks it.
        """
        return self.postpone_tardy and type(self).priority is CameoPolicy.priority

    def deadline_parts(self, ctx: SchedulingContext) -> tuple[float, float, float]:
        """``(d, e, p)``: the priority is the start deadline ``d`` until ``now`` passes the target
        ``e = t_F + L``, then ``now + p`` with ``p = L``."""
        return start_deadline(ctx), result_deadline(ctx), ctx.latency_target

    def priority(self, ctx: SchedulingContext, now: float) -> float:
        if now <= result_deadline(ctx) or not self.postpone_tardy:
            return start_deadline(ctx)
        return now + ctx.latency_target

    def __repr__(self) -> str:
        return f"CameoPolicy(postpone_tardy={self.postpone_tardy})"
