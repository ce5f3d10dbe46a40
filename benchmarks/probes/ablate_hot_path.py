"""What the pieces of the scheduled hot path cost: the same records with one piece patched out at a time.

Measured with ``bench_hot_path.measure`` (in-memory messages of ``bench_worker.py``'s pipeline fed
to a started worker's admit and run stages, thread CPU time, the producer's flush included), while
one piece is patched out. Variants:

- ``unscheduled``: decode and run each record at once (``bench_hot_path.run_unscheduled``);
- ``cameo``: the worker as it is;
- ``no_sink_stamp``: the sink writes no ``cadenza-ctx`` header and records no deadline metrics;
- ``constant_header``: the sink writes a header of a real context's length, made once, and records
  no deadline metrics: ``cameo`` minus this is the stamp's Python work, this minus ``no_sink_stamp``
  what librdkafka charges for carrying a header;
- ``bare_executor``: quanta run their records with no clock reads, crash-slot words, pending counts,
  histograms or policy reply;
- ``scheduler_only``: records are admitted and their quanta taken as in ``cameo`` but none runs
  (nothing is produced): what admission and the scheduler's picks and iteration cost on their own,
  to set beside ``unscheduled``, which pays the decode this includes and the run this leaves out.

The difference between ``cameo`` and a variant is what the piece costs per record. The patched
variants are not correct workers (they exist to be measured), so this is a benchmark script only.

    python benchmarks/probes/ablate_hot_path.py [--records 20000] [--rounds 3] [--out DIR]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

# The scenarios' modules (``_common``, ``bench_hot_path``, ...) are in ../scenarios.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scenarios"))

from _common import environment, write_result
from bench_hot_path import measure

from cadenza.infra.broker.embedded import EmbeddedBroker
from cadenza.scheduling.context import SchedulingContext, encode_context
from cadenza.settings import KafkaSettings
from cadenza.worker.engine.context_stamps import SinkStamper
from cadenza.worker.engine.executor import Executor

VARIANTS = ("unscheduled", "cameo", "no_sink_stamp", "constant_header", "bare_executor", "scheduler_only")
_STAMP = SinkStamper.__call__
_RUN_QUANTUM = Executor.run_quantum
#: A header of the length the sink writes (the pipeline id of `bench_hot_path.measure`, a 64-bit
#: trace id), made once.
_CONSTANT_HEADER = encode_context(
    SchedulingContext("hot-00000000", "bench", 1.0e9, 1.0, 0.0, 0.0, 1, (1 << 63) - 1)
)


def _bare_run_quantum(self: Executor, quantum: Any, schedule: Any) -> int:
    run = schedule.run
    ran = 0
    for _, unit in quantum:
        run(unit, unit.key, unit.value, unit.event_time, None)
        ran += 1
    return ran


def _take_only(self: Executor, quantum: Any, schedule: Any) -> int:
    ran = 0
    for _ in quantum:
        ran += 1
    return ran


def _no_stamp(self: SinkStamper, unit: Any, window: Any, value: object) -> None:
    return None


def _constant_header(self: SinkStamper, unit: Any, window: Any, value: object) -> bytes:
    return _CONSTANT_HEADER


_STAMPS = {"no_sink_stamp": _no_stamp, "constant_header": _constant_header}
_RUNS = {"bare_executor": _bare_run_quantum, "scheduler_only": _take_only}


def _patch(variant: str) -> None:
    SinkStamper.__call__ = _STAMPS.get(variant, _STAMP)  # type: ignore[method-assign]
    Executor.run_quantum = _RUNS.get(variant, _RUN_QUANTUM)  # type: ignore[method-assign]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3, help="rounds of all variants, alternating")
    parser.add_argument("--repeat", type=int, default=3, help="measured batches per variant and round")
    parser.add_argument("--out", type=Path, default=None, help="also write ablate_hot_path.json here")
    args = parser.parse_args()
    results: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    with EmbeddedBroker() as broker:
        settings = KafkaSettings.load(bootstrap_servers=broker.bootstrap_servers)
        try:
            for _ in range(args.rounds):
                for variant in VARIANTS:
                    _patch(variant)
                    mode = "unscheduled" if variant == "unscheduled" else "cameo"
                    results[variant].extend(measure(settings, mode, args.records, args.repeat))
        finally:
            _patch("cameo")
    for variant, values in results.items():
        print(
            f"{variant:16s} median {statistics.median(values):6.2f} us/record  "
            f"min {min(values):6.2f}  ({len(values)} batches)"
        )
    if args.out is not None:
        write_result(
            args.out,
            "ablate_hot_path.json",
            {
                "benchmark": "hot_path_ablation_us_per_record",
                "records_per_batch": args.records,
                "variants": {
                    variant: {
                        "median_us": round(statistics.median(values), 2),
                        "min_us": round(min(values), 2),
                        "runs_us": [round(v, 2) for v in values],
                    }
                    for variant, values in results.items()
                },
                **environment(),
            },
        )


if __name__ == "__main__":
    main()
