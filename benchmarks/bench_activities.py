"""Cost of the activity trace: S3's pipeline (parse -> filter -> map -> sink) with the trace off and on.

End to end (default): runs alternate between the two so that drift in machine load hits both alike;
each run is ``bench_worker.run`` (a backlog produced first, the clock started when the worker has its
partitions, stopped when a counting child has read every output back).

``--hot-path``: the CPU time of the worker's thread per record, as in ``bench_hot_path.py`` (records
built in memory, carrying a ``cadenza-trace`` header as records from another tracing worker do),
through admit, the fetch's trace bookkeeping, the operators and the produce call. Other processes on
the machine do not count, so this resolves differences a shared machine hides end to end.

    python benchmarks/bench_activities.py --out DIR [--records N] [--repetitions K] [--hot-path]
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from _common import machine_and_commit, write_result
from bench_hot_path import messages
from bench_s1 import broker_settings
from bench_worker import PARTITIONS, Event, enrich, is_purchase, run
from confluent_kafka import Message

from cadenza.analysis.kafka_trace import TRACE_HEADER
from cadenza.infra.kafka.clients import make_admin
from cadenza.infra.kafka.topics import TopicSpec, ensure_topics
from cadenza.pipelines import Pipeline
from cadenza.settings import KafkaSettings
from cadenza.worker import Worker


def traced(batch: list[Message]) -> list[Message]:
    for message in batch:
        message.set_headers([(TRACE_HEADER, b"another-worker")])
    return batch


def hot_path(settings: KafkaSettings, records: int, trace: bool) -> float:
    """Thread CPU microseconds per record of one run (after a warm-up run)."""
    suffix = uuid.uuid4().hex[:8]
    source, sink = f"hot-in-{suffix}", f"hot-out-{suffix}"
    ensure_topics(make_admin(settings), [TopicSpec(source, PARTITIONS), TopicSpec(sink, PARTITIONS)])
    pipeline = Pipeline(f"hot-{suffix}", tenant="bench", latency_target="1s")
    pipeline.source(source, value=Event).filter(is_purchase).map(enrich).sink(sink)
    topic = f"hot-activities-{suffix}" if trace else None
    worker = Worker(
        [pipeline], settings, group=f"hot-{suffix}", max_buffered=records + 1, activities_topic=topic
    )
    worker.start()
    output = worker._output
    assert output is not None
    try:
        spent = 0.0
        for _ in range(2):  # the first round warms up
            batch = traced(messages(source, records))
            started = time.thread_time()
            fetched = time.time()
            worker.admit(batch)
            if worker.trace is not None:
                worker.trace.fetch(batch, queued=False, started=fetched, returned=fetched)
            worker.run_for(3600.0)
            spent = time.thread_time() - started
            output.flush()
    finally:
        worker.close()
    return spent / records * 1e6


def run_hot_path(
    out: Path, *, records: int, repetitions: int, bootstrap: str | None = None
) -> dict[str, Any]:
    per_run: dict[str, list[float]] = {"off": [], "on": []}
    with broker_settings(bootstrap) as settings:
        for repetition in range(repetitions):
            for mode in ("off", "on") if repetition % 2 == 0 else ("on", "off"):
                per_run[mode].append(hot_path(settings, records, mode == "on"))
                us = per_run[mode][-1]
                print(f"repetition {repetition + 1}/{repetitions}: trace {mode} {us:.2f} us/record")
    off, on = statistics.median(per_run["off"]), statistics.median(per_run["on"])
    summary: dict[str, Any] = {
        "benchmark": "activity_trace_cost_hot_path",
        "pipeline": "parse(JSON, pydantic) -> filter -> map -> sink(JSON), records in memory",
        "records_per_run": records,
        "repetitions": repetitions,
        "off_us_per_record": round(off, 3),
        "on_us_per_record": round(on, 3),
        "cost_ratio": round(on / off - 1.0, 4),
        "runs": {mode: [round(v, 3) for v in values] for mode, values in per_run.items()},
        **machine_and_commit(),
    }
    write_result(out, "activities_hot_path.json", summary)
    return summary


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
    parser.add_argument("--hot-path", action="store_true", help="thread CPU per record instead of end to end")
    args = parser.parse_args(argv)
    if args.hot_path:
        hot = run_hot_path(
            args.out, records=args.records, repetitions=args.repetitions, bootstrap=args.bootstrap
        )
        off, on = hot["off_us_per_record"], hot["on_us_per_record"]
        print(f"trace off {off} us/record, on {on}: {hot['cost_ratio']:.2%}")
        return
    summary = run_benchmark(
        args.out, records=args.records, repetitions=args.repetitions, bootstrap=args.bootstrap
    )
    off, on, cost = summary["off_rps"], summary["on_rps"], summary["cost_ratio"]
    print(f"trace off {off:,} records/s, on {on:,}: cost {cost:.2%}")


if __name__ == "__main__":
    main()
