"""Cameo's policy: least laxity first, with frontier-aware deadlines for windowed operators."""

from __future__ import annotations

from cadenza.scheduling.context import SchedulingContext
from cadenza.scheduling.policy import BasePolicy, OperatorInfo, SourceRecordInfo, frontier_with_window

__all__ = ["CameoPolicy"]


class CameoPolicy(BasePolicy):
    """Order by the start deadline ``t_F + L - C_path(o)``.

    Subtracting the path cost makes a record that still has a long way to go start earlier than one
    about to reach its sink with the same deadline. At a windowed operator ``t_F`` is the time the
    record's window is expected to fire: a record of a window that closes in ten seconds is not
    needed before then, so it yields to records whose results are due sooner. The frontier is kept
    downstream of the window, so the window's result inherits the window's deadline.
    """

    name = "cameo"

    def _frontier_at_source(self, record: SourceRecordInfo) -> float:
        return frontier_with_window(record.arrival_time, record.window_close_time)

    def _frontier_at_operator(self, ctx_in: SchedulingContext, operator: OperatorInfo) -> float:
        if operator.is_windowed:
            return frontier_with_window(ctx_in.frontier_time, operator.window_close_time)
        return ctx_in.frontier_time

    def _stamp(self, ctx: SchedulingContext) -> float:
        return ctx.frontier_time + ctx.latency_target - ctx.path_cost

    def priority(self, ctx: SchedulingContext, now: float) -> float:
        return ctx.frontier_time + ctx.latency_target - ctx.path_cost
