"""The worker runtime: runs compiled pipelines against Kafka (``cadenza worker``).

``topology`` splits pipelines at repartition points; ``plan`` assembles them, in one pass, into an
immutable plan of tasks (``task`` builds each part's operators, given their context stamps and
metrics) and their schedules (``context_stamps``). ``fetcher`` takes records from the consumer under flow
control; ``decode``, ``executor`` (with ``operators``) and ``output`` are the decode, run and produce
stages; ``checkpoint`` (with ``inflight`` and ``commits``) makes outputs, state and offsets durable in
that order; ``rebalance`` handles assign, revoke and lost, and ``restoring`` brings window state back
on assignment. ``runtime``'s :class:`Worker` is the facade that wires them and runs the loop.
``group_plan`` keeps one plan per group and ``quarantine`` pins poison pills, exactly when
``crash_slot`` (a memory-mapped file naming the running record) survived the worker's death;
``idle_clock`` keeps the worker's own stalls (the replay after a death, a restore, a blocked
loop, a full buffer) and the scheduler's queueing from timing out window inputs, and
``gc_tuning`` keeps the collector off the per-record path. ``wire`` and
``dead_letter`` say what the worker writes where. ``memory`` is an in-memory transport (producer
and records) that :class:`cadenza.testing.PipelineDriver` runs the same plan on.

Users need :class:`Worker`, its settings :class:`WorkerConfig` (and :class:`UnsupportedStepError`,
which it raises for a step it cannot run); everything else is internal and imported from its
module. The names load on first use, so importing one internal module (``cadenza.worker.engine.topology``)
does not pull in the Kafka runtime.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cadenza.worker.config import WorkerConfig
    from cadenza.worker.engine.topology import UnsupportedStepError
    from cadenza.worker.runtime import Worker

_EXPORTS = {
    "Worker": "cadenza.worker.runtime",
    "WorkerConfig": "cadenza.worker.config",
    "UnsupportedStepError": "cadenza.worker.engine.topology",
}

__all__ = ["UnsupportedStepError", "Worker", "WorkerConfig"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'cadenza.worker' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
