"""What the pieces of the scheduled hot path cost: the same records with one piece patched out at a time.

Measured with ``bench_hot_path.measure`` (in-memory messages of ``bench_worker.py``'s pipeline fed
to a started worker's admit and run stages, thread CPU time, the producer's flush included), while
one piece is patched out. Variants:

- ``unscheduled``: decode and run each record at once (``bench_hot_path.run_unscheduled``);
- ``cameo``: the worker as it is;
- ``no_sink_stamp``: the sink writes no ``cadenza-ctx`` header and records no deadline metrics;
- ``bare_executor``: quanta run their records with no clock reads, crash-slot words, pending counts,
  histograms or policy reply.

The difference between ``cameo`` and a variant is what the piece costs per record. The patched
variants are not correct workers (they exist to be measured), so this is a benchmark script only.

    python benchmarks/ablate_hot_path.py [--records 20000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any

from bench_hot_path import measure

from cadenza.infra.broker.embedded import EmbeddedBroker
from cadenza.settings import KafkaSettings
from cadenza.worker.context_stamps import SinkStamper
from cadenza.worker.executor import Executor

VARIANTS = ("unscheduled", "cameo", "no_sink_stamp", "bare_executor")
_STAMP = SinkStamper.__call__
_RUN_QUANTUM = Executor.run_quantum


def _bare_run_quantum(self: Executor, quantum: Any, schedule: Any) -> int:
    run = schedule.run
    ran = 0
    for _, unit in quantum:
        run(unit, unit.key, unit.value, unit.event_time, None)
        ran += 1
    return ran


def _no_stamp(self: SinkStamper, unit: Any, window: Any, value: object) -> None:
    return None


def _patch(variant: str) -> None:
    SinkStamper.__call__ = _no_stamp if variant == "no_sink_stamp" else _STAMP  # type: ignore[method-assign]
    Executor.run_quantum = _bare_run_quantum if variant == "bare_executor" else _RUN_QUANTUM  # type: ignore[method-assign]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3, help="rounds of all variants, alternating")
    parser.add_argument("--repeat", type=int, default=3, help="measured batches per variant and round")
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
            f"{variant:14s} median {statistics.median(values):6.2f} us/record  "
            f"min {min(values):6.2f}  ({len(values)} batches)"
        )


if __name__ == "__main__":
    main()
