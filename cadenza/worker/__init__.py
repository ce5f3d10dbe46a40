"""The worker runtime: runs compiled pipelines against Kafka (``cadenza worker``).

``topology`` splits pipelines at repartition points and ``task`` builds each part's operators;
``decode``, ``operators`` and ``output`` are the decode, run and produce stages, ``commits`` the
commit stage; ``restoring`` brings window state back on assignment; ``plans`` keeps one plan per
group; ``runtime`` drives it all.
``wire`` and ``dead_letter`` say what the worker writes where.
"""

from cadenza.worker.counters import WorkerCounters
from cadenza.worker.plans import GroupPlan, PlanMismatchError, plan_fingerprint
from cadenza.worker.runtime import Worker, default_group
from cadenza.worker.topology import SubTopology, UnsupportedStepError, split
from cadenza.worker.unit import Unit

__all__ = [
    "GroupPlan",
    "PlanMismatchError",
    "SubTopology",
    "Unit",
    "UnsupportedStepError",
    "Worker",
    "WorkerCounters",
    "default_group",
    "plan_fingerprint",
    "split",
]
