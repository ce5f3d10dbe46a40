"""Earliest deadline first, with the deadline ``t_F + L`` of the whole pipeline."""

from __future__ import annotations

from cadenza.scheduling.context import SchedulingContext, result_deadline
from cadenza.scheduling.policy import BasePolicy

__all__ = ["EdfPolicy"]


class EdfPolicy(BasePolicy):
    """Order by ``t_F + L``, with ``t_F`` the source arrival time.

    Unlike :class:`~cadenza.scheduling.policies.cameo.CameoPolicy` it ignores how much work remains
    after the operator and when windows close; it is the comparison point that shows what those two
    refinements buy.
    """

    name = "edf"

    def _stamp(self, ctx: SchedulingContext) -> float:
        return result_deadline(ctx)

    def priority(self, ctx: SchedulingContext, now: float) -> float:
        return result_deadline(ctx)
