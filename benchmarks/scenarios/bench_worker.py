"""Worker throughput: records/s of parse -> filter -> map -> sink on one in-process worker.

The input is produced before the worker starts and the group join is left out of the timing: the
clock starts when the worker has its partitions and stops when a counting consumer has read every
expected output back from the output topic (``produced_per_second`` is the same outputs over the
span of their produce timestamps instead, which leaves out the worker's first fetch and the
counter's last read). The worker runs in a thread of this process (as a test
runs it); the counter runs in a child process, because reading the outputs in this process would
take GIL time from the worker's thread. The embedded broker is used unless ``--bootstrap host:port``
is given.

    python benchmarks/scenarios/bench_worker.py --records 100000 --out benchmarks/results
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from _common import environment, write_result
from confluent_kafka import OFFSET_BEGINNING, TopicPartition
from pydantic import BaseModel

from cadenza.infra.broker.embedded import EmbeddedBroker
from cadenza.infra.kafka.clients import (
    DeliveryReport,
    flush_or_raise,
    make_admin,
    make_consumer,
    make_producer,
)
from cadenza.infra.kafka.topics import TopicSpec, ensure_topics
from cadenza.pipelines import Pipeline
from cadenza.settings import KafkaSettings
from cadenza.worker import Worker
from cadenza.worker.config import WorkerConfig

PARTITIONS = 4


class Event(BaseModel):
    id: int
    user: str
    kind: str
    amount: float
    note: str


class Enriched(BaseModel):
    id: int
    user: str
    amount: float
    doubled: float


def is_purchase(event: Event) -> bool:
    return event.kind != "view"


def enrich(event: Event) -> Enriched:
    return Enriched(id=event.id, user=event.user, amount=event.amount, doubled=event.amount * 2)


def payload(i: int) -> bytes:
    """About 100 bytes of JSON; every fifth record is filtered out."""
    kind = "view" if i % 5 == 0 else "buy"
    return json.dumps(
        {"id": i, "user": f"user-{i % 977:04d}", "kind": kind, "amount": i % 1000 / 10, "note": "x" * 24}
    ).encode()


def produce_input(settings: KafkaSettings, topic: str, records: int) -> None:
    producer, errors = make_producer(settings, **{"linger.ms": 20, "batch.num.messages": 10000})
    report = DeliveryReport()
    for i in range(records):
        while True:
            try:
                producer.produce(topic, payload(i), partition=i % PARTITIONS, on_delivery=report)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10000 == 0:
            producer.poll(0)
    flush_or_raise(producer, report, timeout=120)
    errors.raise_fatal()


def count_outputs(bootstrap: str, topic: str, expected: int, timeout: float) -> None:
    """The counting process: read ``topic`` from the start, print when ``expected`` records arrived.

    Prints ``ready`` once assigned, then ``done <time.monotonic()> <count> <first ms> <last ms>``
    (CLOCK_MONOTONIC is system-wide, so the parent can subtract its own readings; the last two are
    the earliest and latest Kafka timestamps of the outputs, which the worker's producer stamped as
    it produced them, ``-1`` without any).
    """
    settings = KafkaSettings.load(bootstrap_servers=bootstrap)
    consumer, errors = make_consumer(settings, f"bench-count-{uuid.uuid4().hex[:8]}")
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    print("ready", flush=True)
    count = 0
    first_ms = last_ms = -1
    deadline = time.monotonic() + timeout
    while count < expected and time.monotonic() < deadline:
        errors.raise_fatal()
        for message in consumer.consume(10_000, 0.01):
            if message.error() is None:
                count += 1
                stamp = message.timestamp()[1]
                if stamp >= 0:
                    first_ms = stamp if first_ms < 0 else min(first_ms, stamp)
                    last_ms = max(last_ms, stamp)
    print(f"done {time.monotonic()} {count} {first_ms} {last_ms}", flush=True)
    consumer.close()


def produced_rate(outputs: int, first_ms: int, last_ms: int) -> float | None:
    """Outputs per second over the span of their produce timestamps (the first output's excluded,
    as the span starts at it); ``None`` when the span is under 100 ms, which millisecond stamps do
    not resolve to a percent."""
    if outputs < 2 or first_ms < 0 or last_ms - first_ms < 100:
        return None
    return (outputs - 1) / ((last_ms - first_ms) / 1000.0)


class OutputCounter:
    """Counts the outputs in a child process, so reading them back costs the worker's thread no GIL time
    (reading 80k records in this process cut the measured throughput by a third)."""

    def __init__(self, settings: KafkaSettings, topic: str, expected: int, timeout: float = 600) -> None:
        command = [sys.executable, __file__, "--count", topic, "--expected", str(expected)]
        command.extend(["--bootstrap", settings.bootstrap_servers, "--timeout", str(timeout)])
        self.process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        self.stdout = self.process.stdout
        if self.stdout.readline().strip() != "ready":
            raise SystemExit("the output counter did not start")

    def wait(self) -> tuple[float, int, int, int]:
        """(monotonic time when the last expected output was read, outputs read, and the outputs'
        earliest and latest produce timestamps in ms, see :func:`count_outputs`)."""
        _, at, count, first_ms, last_ms = self.stdout.readline().split()
        self.process.wait(30)
        return float(at), int(count), int(first_ms), int(last_ms)


def run(
    settings: KafkaSettings,
    records: int,
    batch_size: int,
    policy: str,
    *,
    noop: bool = False,
    activities_topic: str | None = None,
) -> dict[str, Any]:
    """One timed run; ``noop`` forwards every record unparsed (source -> sink), so the worker's own
    per-record cost (fetch, schedule, produce) is nearly all there is. ``activities_topic`` turns the
    worker's activity trace on."""
    suffix = uuid.uuid4().hex[:8]
    source, sink = f"bench-in-{suffix}", f"bench-out-{suffix}"
    ensure_topics(make_admin(settings), [TopicSpec(source, PARTITIONS), TopicSpec(sink, PARTITIONS)])
    expected = records if noop else sum(1 for i in range(records) if i % 5 != 0)
    started = time.perf_counter()
    produce_input(settings, source, records)
    produce_s = time.perf_counter() - started

    pipeline = Pipeline(f"bench-{suffix}", tenant="bench", latency_target="1s")
    if noop:
        pipeline.source(source).sink(sink, format="json")
    else:
        pipeline.source(source, value=Event).filter(is_purchase).map(enrich).sink(sink)
    worker = Worker(
        [pipeline],
        settings,
        WorkerConfig(
            group=f"bench-{suffix}", batch_size=batch_size, policy=policy, activities_topic=activities_topic
        ),
    )
    counter = OutputCounter(settings, sink, expected)
    thread = threading.Thread(target=worker.run, name="worker", daemon=True)
    join_started = time.monotonic()
    thread.start()
    if not worker.wait_assigned(60):
        worker.stop()
        raise SystemExit("the worker got no partitions within 60 s")
    t0 = time.monotonic()
    join_s = t0 - join_started
    done_at, outputs, first_ms, last_ms = counter.wait()
    elapsed = done_at - t0
    worker.stop()
    thread.join(30)
    if outputs < expected:
        raise SystemExit(f"only {outputs} of {expected} outputs within the deadline")
    produced = produced_rate(outputs, first_ms, last_ms)
    return {
        "benchmark": "worker_throughput",
        "pipeline": "source -> sink" if noop else "parse(JSON, pydantic) -> filter -> map -> sink(JSON)",
        "records": records,
        "outputs": outputs,
        "partitions": PARTITIONS,
        "batch_size": batch_size,
        "policy": policy,
        "seconds": round(elapsed, 3),
        "records_per_second": round(records / elapsed),
        # The same outputs over the time the worker took to produce them (their Kafka timestamps),
        # without its first fetch after the assignment or the counter's last read: the rate alone.
        "produced_per_second": None if produced is None else round(produced),
        "group_join_seconds": round(join_s, 3),
        "input_produce_seconds": round(produce_s, 3),
        "worker_counters": worker.counters.snapshot(),
        **environment(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--policy", default="cameo", help="scheduling policy of the worker")
    parser.add_argument("--bootstrap", default=None, help="an existing broker instead of the embedded one")
    parser.add_argument("--count", metavar="TOPIC", help=argparse.SUPPRESS)  # the counting child
    parser.add_argument("--expected", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--timeout", type=float, default=600, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.count:
        count_outputs(args.bootstrap, args.count, args.expected, args.timeout)
        return
    if args.bootstrap:
        settings = KafkaSettings.load(bootstrap_servers=args.bootstrap)
        result = run(settings, args.records, args.batch_size, args.policy)
    else:
        with EmbeddedBroker() as broker:
            settings = KafkaSettings.load(bootstrap_servers=broker.bootstrap_servers)
            result = run(settings, args.records, args.batch_size, args.policy)
    print(json.dumps(result, indent=2))
    path = write_result(args.out, "worker_throughput.json", result)
    rate, seconds = result["records_per_second"], result["seconds"]
    print(f"{rate:,} records/s ({args.records:,} records in {seconds} s); written to {path}")


if __name__ == "__main__":
    main()
