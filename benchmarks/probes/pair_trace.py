"""What the activity trace costs on the hot path, from pairs of batches run back to back.

A worker built in code records an activity trace by default since 2026-12-06 (``activities_topic``
``cadenza-activities``, as ``cadenza worker`` always did): a recorder call per quantum and a
``cadenza-trace`` header on every record produced. Here one process starts two workers of the
same policy, one with the trace and one without, and runs a batch through each, one right after
the other, ``--rounds`` times (the set-up, thread CPU time and the producer's flush, of
``bench_hot_path.py``); the median of the pairs' ratios is what the trace costs in time.

    cd benchmarks/probes && python pair_trace.py --out DIR [--policy cameo] [--records 20000] [--rounds 8]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

# The scenarios' modules (``_common``, ``bench_hot_path``, ...) are in ../scenarios.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scenarios"))

from _common import environment, write_result
from bench_hot_path import messages, paired_times, run_batch, started_worker

from cadenza.analysis.kafka_trace import ACTIVITIES_TOPIC
from cadenza.infra.broker.embedded import EmbeddedBroker
from cadenza.settings import KafkaSettings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--policy", default="cameo")
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=8, help="pairs measured (one more warms up)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    with EmbeddedBroker() as broker:
        settings = KafkaSettings.load(bootstrap_servers=broker.bootstrap_servers)
        plain, plain_topic = started_worker(settings, args.policy, args.records, prefix="untraced")
        traced, traced_topic = started_worker(
            settings, args.policy, args.records, prefix="traced", activities_topic=ACTIVITIES_TOPIC
        )
        try:
            plain_us, traced_us = paired_times(
                (lambda: messages(plain_topic, args.records), lambda batch: run_batch(plain, True, batch)),
                (lambda: messages(traced_topic, args.records), lambda batch: run_batch(traced, True, batch)),
                args.rounds,
                args.records,
            )
        finally:
            plain.close()
            traced.close()
    ratios = [t / p for t, p in zip(traced_us, plain_us, strict=True)]
    result = {
        "benchmark": "hot_path_activity_trace_ratio",
        "policy": args.policy,
        "records": args.records,
        "ratio_median": round(statistics.median(ratios), 3),
        "ratios": [round(r, 3) for r in ratios],
        "untraced_us": [round(v, 2) for v in plain_us],
        "traced_us": [round(v, 2) for v in traced_us],
        **environment(),
    }
    write_result(args.out, f"pair_trace-{args.policy}-{args.records}.json", result)
    print(
        f"traced / untraced ({args.policy}): median {result['ratio_median']:.3f} over {len(ratios)} pairs "
        f"(range {min(ratios):.3f}-{max(ratios):.3f}); untraced median {statistics.median(plain_us):.2f} us, "
        f"traced {statistics.median(traced_us):.2f} us"
    )


if __name__ == "__main__":
    main()
