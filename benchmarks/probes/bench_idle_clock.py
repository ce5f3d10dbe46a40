"""Micro-benchmark: what the worker's idle clock costs a windowed record.

Window and join steps read their idle-timeout clock when a record is observed and when the watermark
is computed. Since the quarantine's serial replay must not count as an input's silence, that clock is
:class:`cadenza.worker.engine.idle_clock.IdleClock` (a Python method) instead of ``time.monotonic`` (a
builtin). This times one observe and one watermark on a four-input tracker with each clock, and the
two clocks alone, in microseconds per call (best and median of the repeats).

    .venv/bin/python benchmarks/probes/bench_idle_clock.py --out results/
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

# The scenarios' modules (``_common``, ``bench_hot_path``, ...) are in ../scenarios.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scenarios"))

from _common import environment, per_call_us, write_result

from cadenza.operators.event_time import WatermarkTracker
from cadenza.worker.engine.idle_clock import IdleClock


def _step(clock: Callable[[], float]) -> Callable[[], object]:
    tracker = WatermarkTracker([0, 1, 2, 3], idle_timeout=30.0, clock=clock)
    for partition in range(4):
        tracker.observe(partition, 1.0)

    def step() -> object:
        tracker.observe(0, 2.0)
        return tracker.watermark()

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", type=Path, default=Path("results"))
    parser.add_argument("--number", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    idle = IdleClock()
    result: dict[str, object] = {"environment": environment()}
    for name, clock in (("monotonic", time.monotonic), ("idle_clock", idle.now)):
        result[f"observe_watermark_{name}"] = per_call_us(_step(clock), args.number, args.repeat)
        result[f"clock_{name}"] = per_call_us(clock, args.number, args.repeat)
    for key, value in result.items():
        if key != "environment":
            print(f"{key:32s} {value}")
    write_result(args.out, "idle_clock.json", result)


if __name__ == "__main__":
    main()
