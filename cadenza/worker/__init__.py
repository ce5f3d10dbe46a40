"""The worker: runs compiled pipelines against Kafka (``cadenza worker``).

Its rooms (``docs/architecture.md`` draws them): ``engine/`` runs records whatever brings
them (admission, scheduler and executor, operators, timers and progress records, dead letters,
produce; :class:`cadenza.testing.PipelineDriver` runs the same engine in memory); ``kafka/`` is the
membership of a consumer group (fetch lanes, rebalances, restores, checkpoints and commits, the
group's and the ownership plan); ``reliability/`` contains failures (quarantine, crash slot, loop
watch, restarts); ``tuning/`` holds measured inputs (collector settings, true rates, hop estimates).
Above them, ``layout`` plans what a worker runs before it meets a broker, ``components`` lists its
side features behind one contract, ``gauges`` its metrics, ``process`` its metrics endpoint and
signals, and ``runtime``'s :class:`Worker` builds them and runs the loop.

Users need :class:`Worker`, its settings :class:`WorkerConfig` and :class:`ProcessConfig`, the
:class:`WorkerParts` that are code rather than settings (and :class:`UnsupportedStepError`, which it
raises for a step it cannot run); everything else is internal and imported from its module. The
names load on first use, so importing one internal module (``cadenza.worker.engine.topology``) does
not pull in the Kafka runtime.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cadenza.worker.config import ProcessConfig, WorkerConfig
    from cadenza.worker.engine.topology import UnsupportedStepError
    from cadenza.worker.parts import WorkerParts
    from cadenza.worker.runtime import Worker

_EXPORTS = {
    "Worker": "cadenza.worker.runtime",
    "WorkerConfig": "cadenza.worker.config",
    "ProcessConfig": "cadenza.worker.config",
    "WorkerParts": "cadenza.worker.parts",
    "UnsupportedStepError": "cadenza.worker.engine.topology",
}

__all__ = ["ProcessConfig", "UnsupportedStepError", "Worker", "WorkerConfig", "WorkerParts"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'cadenza.worker' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
