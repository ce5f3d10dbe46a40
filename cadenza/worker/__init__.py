"""The worker runtime: runs compiled pipelines against Kafka (``cadenza worker``).

``topology`` splits pipelines at repartition points and ``task`` builds each part's operators;
``fetcher`` takes records from the consumer under flow control; ``decode``, ``operators`` and
``output`` are the decode, run and produce stages; ``checkpoint`` (with ``inflight`` and
``commits``) makes outputs, state and offsets durable in that order; ``rebalance`` handles assign,
revoke and lost, and ``restoring`` brings window state back on assignment; ``runtime`` drives it all.
``wire`` and ``dead_letter`` say what the worker writes where.
"""

from cadenza.worker.counters import WorkerCounters
from cadenza.worker.runtime import Worker, default_group
from cadenza.worker.topology import SubTopology, UnsupportedStepError, split
from cadenza.worker.unit import Unit

__all__ = [
    "SubTopology",
    "Unit",
    "UnsupportedStepError",
    "Worker",
    "WorkerCounters",
    "default_group",
    "split",
]
