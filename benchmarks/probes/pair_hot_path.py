"""The hot path's time ratio, scheduled over unscheduled, from pairs of batches run back to back.

``bench_hot_path.py`` starts a worker per mode and run, so on a host whose speed changes by 2x within
a minute (2 vCPU, 2026-11-30) its per-mode medians move with the host. Here one process starts an
unscheduled worker and a scheduled one and runs a batch through each, one right after the other,
``--rounds`` times: each pair shares the host's speed of the moment, and the median of the pairs'
ratios is what scheduling costs in time. The set-up is ``bench_hot_path.py``'s (thread CPU time,
the producer's flush included). ``--chunk`` admits the scheduled batch that many records at a time,
each chunk run before the next (all at once by default, as ``bench_hot_path.py`` does).

    cd benchmarks/probes && python pair_hot_path.py --out DIR [--policy cameo] [--records 20000] [--rounds 8]
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

from cadenza.infra.broker.embedded import EmbeddedBroker
from cadenza.settings import KafkaSettings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--policy", default="cameo")
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=8, help="pairs measured (one more warms up)")
    parser.add_argument("--chunk", type=int, default=None, help="records admitted at a time")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    step = args.chunk or args.records
    with EmbeddedBroker() as broker:
        settings = KafkaSettings.load(bootstrap_servers=broker.bootstrap_servers)
        plain, plain_topic = started_worker(settings, "fifo", args.records, prefix="pair")
        scheduled, scheduled_topic = started_worker(settings, args.policy, args.records, prefix="pair")
        try:
            unscheduled_us, scheduled_us = paired_times(
                (lambda: messages(plain_topic, args.records), lambda batch: run_batch(plain, False, batch)),
                (
                    lambda: messages(scheduled_topic, args.records),
                    lambda batch: run_batch(scheduled, True, batch, step),
                ),
                args.rounds,
                args.records,
            )
        finally:
            plain.close()
            scheduled.close()
    ratios = [s / u for s, u in zip(scheduled_us, unscheduled_us, strict=True)]
    result = {
        "benchmark": "hot_path_paired_time_ratio",
        "policy": args.policy,
        "records": args.records,
        "admitted_at_a_time": step,
        "ratio_median": round(statistics.median(ratios), 3),
        "ratios": [round(r, 3) for r in ratios],
        "unscheduled_us": [round(v, 2) for v in unscheduled_us],
        "scheduled_us": [round(v, 2) for v in scheduled_us],
        **environment(),
    }
    write_result(args.out, f"pair_hot_path-{args.policy}-{step}.json", result)
    print(
        f"{args.policy} / unscheduled: median {result['ratio_median']:.3f} over {len(ratios)} pairs "
        f"(range {min(ratios):.3f}-{max(ratios):.3f}); unscheduled median "
        f"{statistics.median(unscheduled_us):.2f} us, {args.policy} {statistics.median(scheduled_us):.2f} us"
    )


if __name__ == "__main__":
    main()
