"""The default core budget: the CPUs this process may run on, bounded by a cgroup quota."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cadenza.worker.engine.lessees.cores import available_cores


@pytest.mark.parametrize(
    ("cpu_max", "bound"),
    [
        ("max 100000\n", None),
        ("150000 100000\n", 1),
        ("400000 100000\n", 4),
        ("50000 100000\n", 1),
        ("junk", None),
    ],
)
def test_a_quota_bounds_the_cpus_this_process_may_run_on(
    tmp_path: Path, cpu_max: str, bound: int | None
) -> None:
    path = tmp_path / "cpu.max"
    path.write_text(cpu_max, encoding="ascii")
    cpus = len(os.sched_getaffinity(0))
    assert available_cores(path) == (cpus if bound is None else min(cpus, bound))


def test_without_a_cgroup_file_it_is_the_affinity(tmp_path: Path) -> None:
    assert available_cores(tmp_path / "absent") == len(os.sched_getaffinity(0))
