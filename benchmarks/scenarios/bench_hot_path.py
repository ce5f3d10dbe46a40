"""CPU cost per record of the worker's hot path, with and without the deadline scheduler.

The records are built in memory (``confluent_kafka.Message`` objects of the same JSON as
``bench_worker.py``) and fed to a started worker's admit and run stages, so fetching and broker
round trips are left out and the figure is the Python work per record: decode, scheduling context,
queueing, the operator chain, the sink's context stamp, the produce call (asynchronous; the
embedded broker takes the outputs) and the flush that waits for them (CPU only: the delivery
callbacks, which time each acknowledgement). Time is the CPU time of the running thread, so other
processes on the machine (and librdkafka's own threads) do not count. ``unscheduled`` runs the
same decode and operator chain in arrival order without contexts or queues: the difference is
what scheduling adds per record.

    python benchmarks/scenarios/bench_hot_path.py --out benchmarks/results
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import environment, write_result
from bench_worker import PARTITIONS, Event, enrich, is_purchase, payload
from confluent_kafka import TIMESTAMP_CREATE_TIME, Message

from cadenza.infra.broker.embedded import EmbeddedBroker
from cadenza.infra.kafka.clients import make_admin
from cadenza.infra.kafka.topics import TopicSpec, ensure_topics
from cadenza.pipelines import Pipeline
from cadenza.settings import KafkaSettings
from cadenza.worker import Worker
from cadenza.worker.config import WorkerConfig

MODES = ("unscheduled", "fifo", "cameo", "fair")


def messages(topic: str, count: int) -> list[Message]:
    now_ms = int(time.time() * 1000)
    return [
        Message(
            topic=topic,
            partition=i % PARTITIONS,
            offset=i // PARTITIONS,
            key=None,
            value=payload(i),
            headers=None,
            timestamp=(TIMESTAMP_CREATE_TIME, now_ms),
        )
        for i in range(count)
    ]


def started_worker(
    settings: KafkaSettings,
    policy: str,
    records: int,
    *,
    prefix: str = "hot",
    map_options: dict[str, Any] | None = None,
    **options: Any,
) -> tuple[Worker, str]:
    """A started worker running ``bench_worker.py``'s pipeline (parse -> filter -> map -> sink) on
    fresh topics, with room for ``records`` buffered; returns it and its input topic. ``options``
    are more ``WorkerConfig`` settings; ``map_options`` the map step's keywords (``parallel=``...)."""
    suffix = uuid.uuid4().hex[:8]
    source, sink = f"{prefix}-in-{suffix}", f"{prefix}-out-{suffix}"
    ensure_topics(make_admin(settings), [TopicSpec(source, PARTITIONS), TopicSpec(sink, PARTITIONS)])
    pipeline = Pipeline(f"{prefix}-{suffix}", tenant="bench", latency_target="1s")
    pipeline.source(source, value=Event).filter(is_purchase).map(enrich, **(map_options or {})).sink(sink)
    # No activity trace (on by default since 2026-12-06): the hot path measured is the record path's
    # alone, comparable with the runs before (a trace adds a header to every produced record).
    options = {"activities_topic": "off", **options}
    config = WorkerConfig(group=f"{prefix}-{suffix}", policy=policy, max_buffered=records + 1, **options)
    worker = Worker([pipeline], settings, config)
    worker.start()
    return worker, source


def run_unscheduled(worker: Worker, batch: list[Message]) -> None:
    """Decode and run each record at once, in arrival order (the worker before the scheduler)."""
    stages = worker.engine.stages
    for message in batch:
        topic = message.topic()
        partition = message.partition()
        offset = message.offset()
        assert topic is not None and partition is not None and offset is not None
        for decode, schedule in stages[topic]:
            unit = decode(message, topic, partition, offset)
            if unit is not None:
                schedule.run(unit, unit.key, unit.value, unit.event_time, None)


def run_batch(worker: Worker, scheduled: bool, batch: list[Message], chunk: int | None = None) -> None:
    """Run ``batch`` through ``worker`` and flush its producer (delivery callbacks run in the flush, on
    this thread): unscheduled, or admitted ``chunk`` records at a time (all at once by default),
    each chunk run to the end before the next."""
    output = worker._output
    assert output is not None
    if not scheduled:
        run_unscheduled(worker, batch)
    else:
        step = chunk or len(batch)
        for first in range(0, len(batch), step):
            worker.admit(batch[first : first + step])
            worker.run_for(3600.0)
    output.flush()


#: One side of a pair: what makes its batch (not timed), and what runs it (timed).
Side = tuple[Callable[[], list[Message]], Callable[[list[Message]], None]]


def paired_times(first: Side, second: Side, rounds: int, records: int) -> tuple[list[float], list[float]]:
    """Each side's thread CPU time per record (us) over ``rounds`` pairs of batches run back to back,
    after one pair that warms up: each pair shares the host's speed of the moment."""
    first_us: list[float] = []
    second_us: list[float] = []
    for round_ in range(rounds + 1):
        batch_a, batch_b = first[0](), second[0]()
        started = time.thread_time()
        first[1](batch_a)
        middle = time.thread_time()
        second[1](batch_b)
        ended = time.thread_time()
        if round_:
            first_us.append((middle - started) / records * 1e6)
            second_us.append((ended - middle) / records * 1e6)
    return first_us, second_us


def measure(
    settings: KafkaSettings,
    mode: str,
    records: int,
    repeat: int,
    *,
    chunk: int | None = None,
    quantum_records: int = 16,
) -> list[float]:
    """Thread CPU us per record, per repetition. Scheduled modes admit ``chunk`` records at a time
    (all at once by default), each chunk run to the end before the next, in quanta of at most
    ``quantum_records`` (the worker's default, 16)."""
    policy = "fifo" if mode == "unscheduled" else mode
    worker, source = started_worker(settings, policy, records, quantum_records=quantum_records)
    per_record: list[float] = []
    try:
        for _ in range(repeat + 1):  # the first round warms up and is not counted
            batch = messages(source, records)
            started = time.thread_time()
            run_batch(worker, mode != "unscheduled", batch, chunk)  # the flush is timed too
            per_record.append((time.thread_time() - started) / records * 1e6)
    finally:
        worker.close()
    return per_record[1:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--bootstrap", default=None, help="an existing broker instead of the embedded one")
    args = parser.parse_args()

    def run_all(settings: KafkaSettings) -> dict[str, Any]:
        results: dict[str, list[float]] = {mode: [] for mode in MODES}
        for _ in range(args.repeat):  # modes alternate, so drift in machine load hits all alike
            for mode in MODES:
                results[mode].extend(measure(settings, mode, args.records, 1))
        return {
            mode: {
                "median_us": round(statistics.median(values), 2),
                "min_us": round(min(values), 2),
                "max_us": round(max(values), 2),
                "runs_us": [round(v, 2) for v in values],
            }
            for mode, values in results.items()
        }

    if args.bootstrap:
        modes = run_all(KafkaSettings.load(bootstrap_servers=args.bootstrap))
    else:
        with EmbeddedBroker() as broker:
            modes = run_all(KafkaSettings.load(bootstrap_servers=broker.bootstrap_servers))
    base = modes["unscheduled"]["median_us"]
    result = {
        "benchmark": "hot_path_us_per_record",
        "pipeline": "parse(JSON, pydantic) -> filter -> map -> sink(JSON)",
        "records_per_run": args.records,
        "modes": modes,
        "scheduling_adds_us": {
            m: round(modes[m]["median_us"] - base, 2) for m in MODES if m != "unscheduled"
        },
        **environment(),
    }
    write_result(args.out, "hot_path.json", result)
    for mode in MODES:
        print(f"{mode:12s} {modes[mode]['median_us']:7.2f} us/record (min {modes[mode]['min_us']:.2f})")


if __name__ == "__main__":
    main()
