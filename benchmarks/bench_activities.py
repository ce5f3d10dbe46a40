"""Cost of the activity trace: S3's pipeline (parse -> filter -> map -> sink) with the trace off and on.

Runs alternate between the two so that drift in machine load hits both alike; each run is
``bench_worker.run`` (a backlog produced first, the clock started when the worker has its partitions,
stopped when a counting child has read every output back).

    python benchmarks/bench_activities.py --out DIR [--records N] [--repetitions K]
"""

from __future__ import annotations

import argparse
import statistics
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from _common import machine_and_commit, write_result
from bench_s1 import broker_settings
from bench_worker import run


def run_benchmark(
    out: Path, *, records: int, repetitions: int, bootstrap: str | None = None
) -> dict[str, Any]:
    per_run: dict[str, list[float]] = {"off": [], "on": []}
    with broker_settings(bootstrap) as settings:
        for repetition in range(repetitions):
            order = ("off", "on") if repetition % 2 == 0 else ("on", "off")
            for mode in order:
                topic = f"bench-activities-{uuid.uuid4().hex[:8]}" if mode == "on" else None
                result = run(settings, records, 1000, "cameo", activities_topic=topic)
                per_run[mode].append(float(result["records_per_second"]))
                rps = per_run[mode][-1]
                print(f"repetition {repetition + 1}/{repetitions}: trace {mode} {rps:,.0f} records/s")
    off, on = statistics.median(per_run["off"]), statistics.median(per_run["on"])
    summary: dict[str, Any] = {
        "benchmark": "activity_trace_cost",
        "pipeline": "parse(JSON, pydantic) -> filter -> map -> sink(JSON), 4 partitions, backlog",
        "records_per_run": records,
        "repetitions": repetitions,
        "off_rps": round(off),
        "on_rps": round(on),
        "cost_ratio": round(1.0 - on / off, 4),
        "runs": {mode: [round(v) for v in values] for mode, values in per_run.items()},
        **machine_and_commit(),
    }
    write_result(out, "activities.json", summary)
    return summary


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--bootstrap", default=None)
    args = parser.parse_args(argv)
    summary = run_benchmark(
        args.out, records=args.records, repetitions=args.repetitions, bootstrap=args.bootstrap
    )
    off, on, cost = summary["off_rps"], summary["on_rps"], summary["cost_ratio"]
    print(f"trace off {off:,} records/s, on {on:,}: cost {cost:.2%}")


if __name__ == "__main__":
    main()
