"""First in, first out across operator-partitions: the baseline every event-driven engine ships."""

from __future__ import annotations

from cadenza.scheduling.context import SchedulingContext
from cadenza.scheduling.policy import BasePolicy

__all__ = ["FifoPolicy"]


class FifoPolicy(BasePolicy):
    """Order by the arrival time of the source record a record descends from.

    Records downstream of an early source record therefore go before everything that arrived later,
    which is what "first come, first served" means for a pipeline rather than for a single queue.
    Equal arrival times (broker timestamps are milliseconds) fall back to the scheduler's own
    sequence, i.e. the order in which the records became the heads of their queues.
    """

    name = "fifo"

    def _stamp(self, ctx: SchedulingContext) -> float:
        return ctx.frontier_time

    def priority(self, ctx: SchedulingContext, now: float) -> float:
        return ctx.frontier_time
