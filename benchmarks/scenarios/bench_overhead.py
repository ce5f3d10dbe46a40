"""Scheduling overhead: saturation throughput of a no-op pipeline under ``cameo`` versus ``fifo``.

Both policies go through the same worker path (contexts, queues, measurements); what differs is the
policy's work per record (cameo computes a start deadline from path costs, fifo takes the arrival
time). Runs alternate between the two so that drift in machine load hits both alike; each run is
``bench_worker.run`` with the no-op pipeline (source -> sink): a backlog produced first, the clock
started when the worker has its partitions and stopped when a counting child process has read every
output back.

    python benchmarks/scenarios/bench_overhead.py --out DIR [--quick]
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from _common import machine_and_commit, write_result
from bench_s1 import broker_settings
from bench_worker import run

POLICIES = ("fifo", "cameo")


def run_benchmark(
    out: Path,
    *,
    quick: bool = False,
    bootstrap: str | None = None,
    records: int | None = None,
    repetitions: int | None = None,
    progress: Callable[[str], None] = print,
) -> dict[str, Any]:
    records = records or (30_000 if quick else 100_000)
    repetitions = repetitions or (1 if quick else 3)
    per_run: dict[str, list[float]] = {policy: [] for policy in POLICIES}
    produced: dict[str, list[float]] = {policy: [] for policy in POLICIES}
    with broker_settings(bootstrap) as settings:
        for repetition in range(repetitions):
            order = POLICIES if repetition % 2 == 0 else tuple(reversed(POLICIES))
            for policy in order:
                result = run(settings, records, 1000, policy, noop=True)
                rps = float(result["records_per_second"])
                per_run[policy].append(rps)
                line = f"repetition {repetition + 1}/{repetitions}: {policy} {rps:,.0f} records/s"
                if result["produced_per_second"] is not None:
                    produced[policy].append(float(result["produced_per_second"]))
                    line += f" ({result['produced_per_second']:,} produced per second)"
                progress(line)
    fifo = statistics.median(per_run["fifo"])
    cameo = statistics.median(per_run["cameo"])
    produced_ratio = (
        round(1.0 - statistics.median(produced["cameo"]) / statistics.median(produced["fifo"]), 4)
        if all(produced.values())
        else None
    )
    summary: dict[str, Any] = {
        "benchmark": "scheduling_overhead",
        "pipeline": "source -> sink (JSON), 4 partitions, backlog",
        "records_per_run": records,
        "repetitions": repetitions,
        "fifo_rps": round(fifo),
        "cameo_rps": round(cameo),
        "overhead_ratio": round(1.0 - cameo / fifo, 4),
        "runs": {policy: [round(v) for v in values] for policy, values in per_run.items()},
        # The same ratio over the span of the outputs' produce timestamps (bench_worker.produced_rate):
        # without the first fetch after the assignment and the counter's last read, which in a run
        # of about a second move the end-to-end rate by up to a quarter.
        "produced_overhead_ratio": produced_ratio,
        "produced_runs": {policy: [round(v) for v in values] for policy, values in produced.items()},
        "min_max": {policy: [round(min(v)), round(max(v))] for policy, v in per_run.items()},
        **machine_and_commit(),
    }
    write_result(out, "overhead.json", summary)
    return summary


def format_table(result: dict[str, Any]) -> str:
    lines = [f"{'policy':8s} {'median rec/s':>13s} {'min':>9s} {'max':>9s}"]
    for policy in POLICIES:
        low, high = result["min_max"][policy]
        lines.append(f"{policy:8s} {result[f'{policy}_rps']:>13,d} {low:>9,d} {high:>9,d}")
    lines.append(f"overhead of cameo versus fifo: {result['overhead_ratio']:.1%}")
    if result["produced_overhead_ratio"] is not None:
        lines.append(f"the same over the outputs' produce span: {result['produced_overhead_ratio']:.1%}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--bootstrap", default=None)
    args = parser.parse_args(argv)
    print(format_table(run_benchmark(args.out, quick=args.quick, bootstrap=args.bootstrap)))


if __name__ == "__main__":
    main()
