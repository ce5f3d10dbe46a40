"""The worker runtime: runs compiled pipelines against Kafka (``cadenza worker``).

``topology`` splits pipelines at repartition points; ``plan`` assembles them, in one pass, into an
immutable plan of tasks (``task`` builds each part's operators, given their context stamps and
metrics) and their schedules (``deadlines``). ``fetcher`` takes records from the consumer under flow
control; ``decode``, ``executor`` (with ``operators``) and ``output`` are the decode, run and produce
stages; ``checkpoint`` (with ``inflight`` and ``commits``) makes outputs, state and offsets durable in
that order; ``rebalance`` handles assign, revoke and lost, and ``restoring`` brings window state back
on assignment. ``runtime``'s :class:`Worker` is the facade that wires them and runs the loop.
``plans`` keeps one plan per group and ``quarantine`` pins poison pills. ``wire`` and
``dead_letter`` say what the worker writes where. ``memory`` is an in-memory transport (producer
and records) that :class:`cadenza.testing.PipelineDriver` runs the same plan on.
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
