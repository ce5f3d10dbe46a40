"""From DS2's per-sub-topology parallelism to a number of worker processes.

DS2 decides per operator, but a cadenza worker runs every sub-topology, so the pool can only choose
how many workers to run. A DS2 instance is one instance kept busy all of its useful time, i.e. one
core's worth of that sub-topology's work; a worker is one Python process, i.e. at most one core. The
pool therefore needs the sum of the per-sub-topology demands in cores, divided by how busy a worker
should be allowed to get (headroom for bursts and deadlines). A sub-topology cannot use more
instances than it has partitions (one consumer per partition), so its demand is capped there and
the excess is reported with the fix: more partitions. Workers beyond the largest partition count
would own nothing, so that bounds the result too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["UnderPartitioned", "WorkerDemand", "workers_for"]


@dataclass(frozen=True)
class UnderPartitioned:
    """A sub-topology whose optimal parallelism exceeds its partitions; the fix is more partitions."""

    sub_topology: str
    optimal_parallelism: float
    partitions: int

    @property
    def fix(self) -> str:
        return (
            f"sub-topology {self.sub_topology!r} needs {math.ceil(self.optimal_parallelism)} "
            f"instances but its input has {self.partitions} partitions: increase its input topic "
            f"to at least {math.ceil(self.optimal_parallelism)} partitions"
        )


@dataclass(frozen=True)
class WorkerDemand:
    """How many workers the pool needs, and why."""

    workers: int
    cores: float
    under_partitioned: tuple[UnderPartitioned, ...]


def workers_for(
    parallelism: Mapping[str, float],
    partitions: Mapping[str, int],
    utilisation_target: float,
) -> WorkerDemand:
    """Workers needed for each sub-topology's optimal parallelism (cores of useful work).

    ``workers = ceil(sum(min(parallelism[s], partitions[s])) / utilisation_target)``, then at least 1
    and at most ``max(partitions)``.
    """
    if not 0 < utilisation_target <= 1:
        raise ValueError(f"utilisation_target must be in (0, 1], got {utilisation_target!r}")
    if not parallelism:
        raise ValueError("parallelism names no sub-topology")
    for name, demand in parallelism.items():
        if name not in partitions:
            raise ValueError(f"sub-topology {name!r} has no partition count")
        if not math.isfinite(demand) or demand < 0:
            raise ValueError(f"sub-topology {name!r}: parallelism must be finite and >= 0, got {demand!r}")
        if partitions[name] <= 0:
            raise ValueError(f"sub-topology {name!r}: partitions must be >= 1, got {partitions[name]!r}")
    cores = sum(min(demand, partitions[name]) for name, demand in parallelism.items())
    under = tuple(
        UnderPartitioned(name, demand, partitions[name])
        for name, demand in parallelism.items()
        if demand > partitions[name]
    )
    most_partitions = max(partitions[name] for name in parallelism)
    workers = min(max(1, math.ceil(cores / utilisation_target)), most_partitions)
    return WorkerDemand(workers=workers, cores=cores, under_partitioned=under)
