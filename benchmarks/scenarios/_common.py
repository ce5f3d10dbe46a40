"""What every benchmark script shares: per-call timing, the machine record and the JSON output.

Results are only comparable with the machine and commit they were measured on, so every JSON file
carries both (:mod:`cadenza.demo.machine`, shared with the demo); timing uses ``timeit`` (garbage
collection off while timing) and reports the best and the median of the repeats.
"""

from __future__ import annotations

import signal
import statistics
import subprocess
import timeit
from collections.abc import Callable

from cadenza.demo.machine import environment, machine_and_commit, write_result

__all__ = [
    "environment",
    "machine_and_commit",
    "per_call_us",
    "quantile",
    "stop_process",
    "summary_us",
    "write_result",
]


def quantile(values: list[float], q: float) -> float:
    """The ``q`` rank quantile of ``values`` (a measured value, never an interpolated one)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summary_us(per_call_us: list[float]) -> dict[str, float]:
    """Best and median of per-call timings in microseconds."""
    return {"best_us": round(min(per_call_us), 4), "median_us": round(statistics.median(per_call_us), 4)}


def per_call_us(fn: Callable[[], object], number: int, repeat: int) -> dict[str, float]:
    """Time ``number`` calls of ``fn``, ``repeat`` times; best and median microseconds per call."""
    times = timeit.repeat(fn, number=number, repeat=repeat)
    return summary_us([t / number * 1e6 for t in times])


def stop_process(process: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
    """SIGTERM ``process`` (a system under test shuts down cleanly on it), SIGKILL it if it lingers."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)
