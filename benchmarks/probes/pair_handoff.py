"""What handing a step's calls to a process lessee costs the worker's loop, per record.

Two workers in one process run the same pipeline (parse -> filter -> map -> sink, the hot-path
benchmark's): one with the map on the loop (``parallel=1``), one with the map on a process lessee
(``parallel=1, timeout="60s"``: a step with a timeout never runs a call on the loop, so every call
crosses to the lessee). A batch runs through each, back to back, ``--rounds`` times; the difference
of the pair's CPU per record is the hand-off: pickling the batch to the pipe, the reader thread
taking the answer back, and the release in offset order. Two clocks: the loop thread's CPU
(``thread``) and the whole worker process's (``process``: the reader thread too; the lessee's own
process is not in it, since its CPU runs the call itself, which the inline side pays as well).

    cd benchmarks/probes && python pair_handoff.py --out DIR [--records 20000] [--rounds 8]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scenarios"))

from _common import environment, write_result
from bench_hot_path import messages, started_worker
from confluent_kafka import Message

from cadenza.infra.broker.embedded import EmbeddedBroker
from cadenza.settings import KafkaSettings
from cadenza.worker import Worker

ON_LESSEE = {"parallel": 1, "executor": "process", "timeout": "60s"}


def run_through(worker: Worker, batch: list[Message]) -> None:
    """Admit the batch, run it, and wait for every call to come back and be released."""
    engine = worker.engine
    worker.admit(batch)
    worker.run_for(3600.0)
    while engine.lessee_held:
        engine.wait_for_lessees(0.005)
        worker.run_for(3600.0)
    output = worker._output
    assert output is not None
    output.flush()


def timed(worker: Worker, batch: list[Message]) -> tuple[float, float]:
    thread, process = time.thread_time(), time.process_time()
    run_through(worker, batch)
    return time.thread_time() - thread, time.process_time() - process


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=8, help="pairs measured (one more warms up)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    n = args.records
    pairs: list[dict[str, float]] = []
    with EmbeddedBroker() as broker:
        settings = KafkaSettings.load(bootstrap_servers=broker.bootstrap_servers)
        inline, inline_topic = started_worker(settings, "cameo", n, prefix="inline")
        leased, leased_topic = started_worker(settings, "cameo", n, prefix="leased", map_options=ON_LESSEE)
        try:
            hub = leased.engine.lessees
            assert hub is not None and hub.ready(60.0), "the lessee did not start"
            for round_ in range(args.rounds + 1):
                a, b = messages(inline_topic, n), messages(leased_topic, n)
                inline_cpu = timed(inline, a)
                leased_cpu = timed(leased, b)
                if round_:
                    pairs.append(
                        {
                            "inline_thread_us": inline_cpu[0] / n * 1e6,
                            "leased_thread_us": leased_cpu[0] / n * 1e6,
                            "inline_process_us": inline_cpu[1] / n * 1e6,
                            "leased_process_us": leased_cpu[1] / n * 1e6,
                        }
                    )
            step = hub.steps[0]
            handed, handoff_s = step.stats.handoff_calls, step.stats.handoff_seconds
        finally:
            inline.close()
            leased.close()
    records_per_call = n * (args.rounds + 1) / max(handed, 1)
    thread = [p["leased_thread_us"] - p["inline_thread_us"] for p in pairs]
    process = [p["leased_process_us"] - p["inline_process_us"] for p in pairs]
    result = {
        "benchmark": "lessee_handoff_per_record",
        "records": n,
        "calls_per_record": round(1 / records_per_call, 3),
        "handoff_thread_us_median": round(statistics.median(thread), 2),
        "handoff_process_us_median": round(statistics.median(process), 2),
        "handoff_process_us_per_call": round(
            statistics.median(process) * n * (args.rounds + 1) / max(handed, 1), 2
        ),
        "send_us_per_call": round(handoff_s / max(handed, 1) * 1e6, 2),
        "pairs": [{k: round(v, 2) for k, v in p.items()} for p in pairs],
        **environment(),
    }
    write_result(args.out, f"pair_handoff-{n}.json", result)
    print(
        f"hand-off per record to a process lessee, over {len(pairs)} pairs: loop thread "
        f"{result['handoff_thread_us_median']:.2f} us (range {min(thread):.2f}-{max(thread):.2f}), "
        f"worker process {result['handoff_process_us_median']:.2f} us (range {min(process):.2f}-"
        f"{max(process):.2f}; {result['handoff_process_us_per_call']:.2f} us per call); "
        f"pickling and writing alone {result['send_us_per_call']:.2f} us per call; "
        f"inline map path {statistics.median(p['inline_thread_us'] for p in pairs):.2f} us per record"
    )


if __name__ == "__main__":
    main()
