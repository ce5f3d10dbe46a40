"""Import cost of declaring a pipeline: ``import cadenza`` and the names a pipeline module uses.

Each run is a fresh interpreter (``python -X importtime``) executing what a user's pipeline module
does: ``import cadenza``, then ``cadenza.Pipeline`` / ``cadenza.Tumbling`` and one declared pipeline.
Reported per run, median of ``--runs`` (default 5):

- ``importtime_s``: the summed cumulative ``-X importtime`` figures of the top-level imports that
  cadenza caused (``cadenza`` itself and the sub-packages its lazy attributes load afterwards); the
  interpreter's own start-up (``site``, an editable install's finder) is not counted;
- ``wall_s``: ``time.perf_counter`` around the same statements inside the child, and ``cpu_s``:
  ``time.process_time`` around them (CPU time: less inflated than wall time when other processes
  share the cores, so the figure to compare across loaded runs);
- ``modules``: how many modules the child has loaded beyond a bare interpreter, and whether any Kafka
  client, Prometheus or Spark module is among them (there should be none).

For contrast, the same for ``from cadenza import Worker`` (what a worker process pays), and for
pydantic alone (import it, declare and build one model): the floor under any module that declares
pipelines with pydantic value models, most of what declaring costs. ``--source DIR``
measures another tree's ``cadenza`` package (e.g. an older commit's, from ``git archive``) in the same
conditions, for a before/after on a machine whose load moves the absolute figures.

    python benchmarks/probes/bench_import.py --out DIR [--runs 5] [--source DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# The scenarios' modules (``_common``, ``bench_hot_path``, ...) are in ../scenarios.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scenarios"))

from _common import machine_and_commit, write_result

HEAVY = ("confluent_kafka", "prometheus_client", "pyspark")

DECLARE = """
import time, sys
before = set(sys.modules)
started, cpu_started = time.perf_counter(), time.process_time()
import cadenza
pipeline = cadenza.Pipeline("bench-import", tenant="t", latency_target="250ms")
pipeline.source("in").key_by(lambda v: v).window(cadenza.Tumbling("1s")).count().sink("out")
wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
"""

WORKER = """
import time, sys
before = set(sys.modules)
started, cpu_started = time.perf_counter(), time.process_time()
from cadenza import Worker
wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
"""

PYDANTIC = """
import time, sys
before = set(sys.modules)
started, cpu_started = time.perf_counter(), time.process_time()
from pydantic import BaseModel
class Click(BaseModel):
    user: str
Click(user="u")
wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
"""

REPORT = """
import json
loaded = set(sys.modules) - before
heavy = sorted({m.split(".")[0] for m in loaded if m.split(".")[0] in HEAVY})
print(json.dumps({"wall_s": wall, "cpu_s": cpu, "modules": len(loaded), "heavy": heavy,
                  "file": getattr(sys.modules.get("cadenza"), "__file__", None)}))
"""


def _importtime_s(stderr: str, prefix: str) -> float:
    """Sum of the cumulative times (us) of top-level imports whose module name starts with ``prefix``."""
    total_us = 0
    for line in stderr.splitlines():
        if not line.startswith("import time:"):
            continue
        _, cumulative, name = line.split("|")
        if name.startswith(f" {prefix}") and not name.startswith("  "):  # top level: one space, no nesting
            total_us += int(cumulative)
    return total_us / 1e6


def one_run(code: str, source: Path, prefix: str = "cadenza") -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(source)}
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", f"HEAVY = {HEAVY!r}\n{code}{REPORT}"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        timeout=120,
        cwd=source,
    )
    measured: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    file = measured.pop("file")
    if file is not None and not Path(file).resolve().is_relative_to(source):
        raise SystemExit(f"the child imported cadenza from outside {source}")
    measured["importtime_s"] = _importtime_s(result.stderr, prefix)
    return measured


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "importtime_s_median": round(statistics.median(r["importtime_s"] for r in runs), 4),
        "wall_s_median": round(statistics.median(r["wall_s"] for r in runs), 4),
        "cpu_s_median": round(statistics.median(r["cpu_s"] for r in runs), 4),
        "importtime_s_min": round(min(r["importtime_s"] for r in runs), 4),
        "modules": runs[-1]["modules"],
        "heavy_modules_loaded": sorted({m for r in runs for m in r["heavy"]}),
        "runs": runs,
    }


def run_benchmark(out: Path, *, runs: int = 5, source: Path | None = None) -> dict[str, Any]:
    source = (source or Path(__file__).resolve().parents[2]).resolve()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    result: dict[str, Any] = {
        "benchmark": "import_time",
        "source": str(source),
        # One run each first, not counted: it byte-compiles the tree, which later runs do not pay.
        "warmup": [one_run(DECLARE, source)["wall_s"], one_run(WORKER, source)["wall_s"]],
        "declare_pipeline": summarise([one_run(DECLARE, source) for _ in range(runs)]),
        "import_worker": summarise([one_run(WORKER, source) for _ in range(runs)]),
        "pydantic_alone": summarise([one_run(PYDANTIC, source, "pydantic") for _ in range(runs)]),
        "runs_per_case": runs,
        "load_average_1m_before": load,
        **machine_and_commit(),
    }
    write_result(out, "import.json", result)
    return result


def format_table(result: dict[str, Any]) -> str:
    lines = [
        f"{'case':18s} {'importtime s':>13s} {'(min)':>7s} {'wall s':>8s} {'cpu s':>7s} {'modules':>8s}  "
        "heavy modules"
    ]
    for case in ("declare_pipeline", "import_worker", "pydantic_alone"):
        entry = result[case]
        lines.append(
            f"{case:18s} {entry['importtime_s_median']:>13.3f} {entry['importtime_s_min']:>7.3f} "
            f"{entry['wall_s_median']:>8.3f} {entry['cpu_s_median']:>7.3f} {entry['modules']:>8d}  "
            f"{', '.join(entry['heavy_modules_loaded']) or '-'}"
        )
    lines.append(
        f"(medians of {result['runs_per_case']} runs; 1-min load average {result['load_average_1m_before']})"
    )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--source", type=Path, default=None, help="directory holding the cadenza package")
    args = parser.parse_args(argv)
    print(format_table(run_benchmark(args.out, runs=args.runs, source=args.source)))


if __name__ == "__main__":
    main()
