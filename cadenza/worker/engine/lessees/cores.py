"""How many cores this process may use: the default of a worker's ``cores`` budget.

``os.cpu_count()`` is the host's count, which in a container limited by a CPU quota, or a process
pinned to some CPUs, overstates what the lessees can use: process lessees beyond the real cores
would only take turns with the loop. So the budget is the least of the CPUs this process may run
on and the cgroup's quota (cgroup v2 ``cpu.max``), rounded down, at least one.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

__all__ = ["available_cores"]

CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")


def available_cores(cpu_max: Path = CGROUP_CPU_MAX) -> int:
    """The cores this process may use (see the module docstring)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        cores = os.cpu_count() or 1
    quota = _quota(cpu_max)
    if quota is not None:
        cores = min(cores, max(1, math.floor(quota)))
    return max(1, cores)


def _quota(cpu_max: Path) -> float | None:
    """The cgroup v2 quota in cores (``"150000 100000"`` -> 1.5); ``None`` for none or unreadable."""
    try:
        text = cpu_max.read_text(encoding="ascii").split()
    except OSError:
        return None
    if len(text) != 2 or text[0] == "max":
        return None
    try:
        quota, period = float(text[0]), float(text[1])
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None
