"""Instructions per record on the worker's hot path, with and without the scheduler: a count, not a time.

``bench_hot_path.py`` times the same work in thread CPU seconds, and on a shared 2-vCPU host its
batches of one mode spread by up to 2x (``results/2026-11-30/NOTES.md``), so a change of a few percent
cannot be seen there. This script counts instead: each mode runs in a child process under valgrind's
callgrind (instructions executed, deterministic up to the collector's and the allocator's state),
once with ``--low`` and once with ``--high`` records, and the difference of the main thread's counts
over the difference of the records is what one record costs, with start-up, imports and the worker's
set-up cancelled out. The set-up is ``bench_hot_path.py``'s (in-memory messages of
``bench_worker.py``'s pipeline, a started worker, all records admitted at once and run, the producer's
flush included); the broker runs in this process, outside valgrind.

What a count leaves out: how long an instruction takes (cache misses, branch misses), so a count
ratio is a floor under the time ratio, not the time ratio; and librdkafka's own threads (only the
main thread, the one ``bench_hot_path.py`` times too, is counted). Quanta are bounded by records
only (16, the worker's default): under valgrind a record takes about a millisecond, so the worker's
2 ms time budget would cut quanta after a record or two and count per-quantum work that native runs
do not do.

    cd benchmarks/probes && python count_hot_path.py --out DIR [--modes unscheduled,cameo]
        [--low 500 --high 2500]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

# The scenarios' modules (``_common``, ``bench_hot_path``, ...) are in ../scenarios.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scenarios"))

from _common import environment, write_result
from bench_hot_path import messages, run_batch, started_worker

from cadenza.infra.broker.embedded import EmbeddedBroker
from cadenza.settings import KafkaSettings

MODES = ("unscheduled", "fifo", "cameo", "fair")


def run_child(bootstrap: str, mode: str, records: int) -> None:
    """The counted process: one worker, ``records`` records through one mode."""
    settings = KafkaSettings.load(bootstrap_servers=bootstrap)
    policy = "fifo" if mode == "unscheduled" else mode
    # No time bound on a quantum (the config takes none: an hour), so that valgrind's slowness does not
    # cut quanta short.
    worker, source = started_worker(settings, policy, records, prefix="count", quantum_ms=3_600_000.0)
    try:
        run_batch(worker, mode != "unscheduled", messages(source, records))
    finally:
        worker.close()


def main_thread_events(out_dir: Path) -> dict[str, int]:
    """The main thread's event totals from callgrind's per-thread files (``-01`` is the first thread)."""
    (path,) = out_dir.glob("callgrind.*.out-01")
    names: list[str] = []
    for line in path.read_text().splitlines():
        if line.startswith("events:"):
            names = line.split()[1:]
        elif line.startswith("summary:"):
            return dict(zip(names, (int(value) for value in line.split()[1:]), strict=True))
    raise RuntimeError(f"no summary line in {path}")


def per_record(low: dict[str, int], high: dict[str, int], records: int) -> dict[str, int]:
    """Each event's count per record: the two runs' difference over the records between them (what
    both runs did once, start-up and set-up, cancels out)."""
    if low.keys() != high.keys():
        raise ValueError(f"the runs counted different events: {sorted(low)} and {sorted(high)}")
    return {name: round((high[name] - low[name]) / records) for name in high}


def count(bootstrap: str, mode: str, records: int, cache_sim: bool, branch_sim: bool) -> dict[str, int]:
    with tempfile.TemporaryDirectory(prefix="count-hot-path-") as tmp:
        command = [
            "valgrind",
            "--tool=callgrind",
            "--separate-threads=yes",
            f"--cache-sim={'yes' if cache_sim else 'no'}",
            f"--branch-sim={'yes' if branch_sim else 'no'}",
            f"--callgrind-out-file={tmp}/callgrind.%p.out",
            sys.executable,
            str(Path(__file__).resolve()),
            "--child",
            bootstrap,
            mode,
            str(records),
        ]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{mode} x {records} failed under valgrind:\n{done.stderr[-3000:]}")
        return main_thread_events(Path(tmp))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--modes", default="unscheduled,cameo", help=f"comma-separated, of {', '.join(MODES)}"
    )
    parser.add_argument("--low", type=int, default=500, help="records of the first counted run per mode")
    parser.add_argument("--high", type=int, default=2500, help="records of the second")
    parser.add_argument("--cache-sim", action="store_true", help="also count simulated cache misses")
    parser.add_argument(
        "--branch-sim", action="store_true", help="also count simulated branch mispredictions"
    )
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--child", nargs=3, metavar=("BOOTSTRAP", "MODE", "RECORDS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        bootstrap, mode, records = args.child
        run_child(bootstrap, mode, int(records))
        return
    if shutil.which("valgrind") is None:
        sys.exit("count_hot_path.py needs valgrind on the PATH (Debian: apt install valgrind)")
    modes = [mode.strip() for mode in args.modes.split(",") if mode.strip()]
    unknown = sorted(set(modes) - set(MODES))
    if unknown or not 0 < args.low < args.high:
        sys.exit(f"modes must be among {MODES} (got {unknown}) and 0 < --low < --high")

    counted: dict[str, dict[str, Any]] = {}
    with EmbeddedBroker() as broker:
        for mode in modes:
            low = count(broker.bootstrap_servers, mode, args.low, args.cache_sim, args.branch_sim)
            high = count(broker.bootstrap_servers, mode, args.high, args.cache_sim, args.branch_sim)
            events = per_record(low, high, args.high - args.low)
            counted[mode] = {"per_record": events, "low": low, "high": high}
            print(f"{mode:12s} {events['Ir']:9,d} instructions per record  {events}", flush=True)
    base = counted.get("unscheduled")
    ratios = (
        {mode: round(row["per_record"]["Ir"] / base["per_record"]["Ir"], 3) for mode, row in counted.items()}
        if base is not None
        else {}
    )
    for mode, ratio in ratios.items():
        if mode != "unscheduled":
            print(f"{mode} / unscheduled: {ratio:.3f}x instructions")
    if args.out is not None:
        result = {
            "benchmark": "hot_path_instructions_per_record",
            "pipeline": "parse(JSON, pydantic) -> filter -> map -> sink(JSON)",
            "records": {"low": args.low, "high": args.high},
            "quantum": "16 records, no time budget",
            "modes": counted,
            "ratio_to_unscheduled": ratios,
            **environment(),
        }
        write_result(args.out, "count_hot_path.json", result)


if __name__ == "__main__":
    main()
