"""What a record costs when it comes alone: per-record CPU by admitted batch size and quantum size.

``bench_hot_path.py`` admits 20,000 records at once and runs them in quanta of 16, so the costs paid
once per admitted batch and once per quantum vanish in the average. A worker at low load (a record
or a few per fetch response) pays them for every record or two. Same set-up as
``bench_hot_path.py`` (in-memory messages of ``bench_worker.py``'s pipeline, a started ``cameo``
worker, thread CPU time, the producer's flush included); the records are admitted ``chunk`` at a
time, each chunk run to the end before the next (a round of the loop), with ``quantum_records``
records per quantum at most. Messages spread over the partitions in turn, so a chunk of ``k`` <= 4
records makes ``k`` quanta of one record.

    cd benchmarks/probes && python bench_batch_granularity.py --out DIR
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
from cadenza.settings import KafkaSettings

#: (quantum_records, admitted batch size): the hot path's shape, one-record quanta, lone records.
SHAPES = ((16, 1000), (1, 1000), (16, 4), (16, 1), (1, 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=8000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    with EmbeddedBroker() as broker:
        settings = KafkaSettings.load(bootstrap_servers=broker.bootstrap_servers)
        for quantum_records, chunk in SHAPES:
            runs = measure(
                settings, "cameo", args.records, args.repeat, chunk=chunk, quantum_records=quantum_records
            )
            row = {
                "quantum_records": quantum_records,
                "admitted_batch": chunk,
                "us_per_record_median": round(statistics.median(runs), 2),
                "us_per_record_runs": [round(r, 2) for r in runs],
            }
            rows.append(row)
            print(
                f"quantum {quantum_records:2d} records, batches of {chunk:4d}: "
                f"{row['us_per_record_median']:.2f} us/record {row['us_per_record_runs']}",
                flush=True,
            )
    result = {"benchmark": "batch_granularity", "records": args.records, "rows": rows, **environment()}
    write_result(args.out, "batch_granularity.json", result)


if __name__ == "__main__":
    main()
