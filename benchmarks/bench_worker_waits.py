"""How long a worker waits on the broker under a steady live input, and what that does to latency.

A worker that waits for acknowledgements (a flush at each checkpoint, a flushed quarantine lease)
fetches and runs nothing meanwhile; on a broker that acknowledges ``acks=all`` after a delay (the
embedded broker: about 100 ms) those waits are a large share of the worker's time, and every record
that arrives during one waits too. This runs one in-process worker (a stateless map to a sink, and a
per-key tumbling count, so that checkpoints write changelogs) on a live input produced at
``--rate`` records/s by a child process for ``--seconds``, and reports:

- ``checkpoint_share``: the share of the measured wall time the worker spent inside checkpoint calls
  (``WorkerCounters.commit_ms``);
- ``worker_cpu_share``: the worker process's CPU time over the same wall time (the broker and the
  input process run elsewhere);
- the map results' latency, p50/p99/max ms, from the input's send time (inside the record) to the
  moment a reader process read the result, leaving out the first ``WARMUP_S`` seconds of results;
  and the p99 of each second.

Run it on two commits to compare (``PYTHONPATH`` picks the tree):

    PYTHONPATH=$PWD python benchmarks/bench_worker_waits.py --out DIR [--rate 1000 --seconds 20]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from _common import environment, quantile, write_result
from confluent_kafka import OFFSET_END, TopicPartition
from pydantic import BaseModel

from cadenza.infra.broker.embedded import EmbeddedBroker
from cadenza.infra.kafka.clients import make_admin, make_consumer, make_producer
from cadenza.infra.kafka.topics import TopicSpec, ensure_topics
from cadenza.pipelines import Pipeline, Tumbling
from cadenza.settings import KafkaSettings
from cadenza.worker import Worker

PARTITIONS = 4
KEYS = 500
#: Results read in the first seconds are left out of the latencies (the first fetches of a fresh input
#: and the first leases take about a second; ``p99_ms_by_second`` still shows them).
WARMUP_S = 2.0


class Reading(BaseModel):
    id: int
    key: str
    sent: float


def stamp(reading: Reading) -> dict[str, Any]:
    return {"id": reading.id, "sent": reading.sent}


def produce_live(bootstrap: str, topic: str, rate: float, seconds: float) -> None:
    """The input process: ``rate`` records/s for ``seconds``, each carrying its send time."""
    settings = KafkaSettings.load(bootstrap_servers=bootstrap)
    producer, errors = make_producer(settings, **{"linger.ms": 1})
    start = time.time()
    sent = 0
    while (now := time.time()) < start + seconds:
        due = int((now - start) * rate)
        while sent < due:
            body = {"id": sent, "key": f"k{sent % KEYS}", "sent": time.time()}
            producer.produce(topic, json.dumps(body).encode(), f"k{sent % KEYS}".encode())
            sent += 1
        producer.poll(0)
        time.sleep(0.001)
    producer.flush(30)
    errors.raise_fatal()
    print(f"sent {sent}", flush=True)


def read_latencies(bootstrap: str, topic: str, seconds: float) -> None:
    """The reader process: read results as they come for ``seconds``; print ``[read at, latency]``
    pairs (seconds since the first result, ms)."""
    settings = KafkaSettings.load(bootstrap_servers=bootstrap)
    consumer, _ = make_consumer(settings, f"bench-waits-{uuid.uuid4().hex[:8]}", **{"fetch.wait.max.ms": 5})
    consumer.assign([TopicPartition(topic, p, OFFSET_END) for p in range(PARTITIONS)])
    print("ready", flush=True)
    latencies: list[tuple[float, float]] = []
    deadline = time.monotonic() + seconds
    first = 0.0
    while time.monotonic() < deadline:
        for message in consumer.consume(1000, 0.01):
            if message.error() is None:
                value = json.loads(message.value() or b"{}")
                now = time.time()
                first = first or now
                latencies.append((round(now - first, 3), (now - float(value["sent"])) * 1000.0))
    consumer.close()
    print(json.dumps(latencies), flush=True)


def run(settings: KafkaSettings, rate: float, seconds: float) -> dict[str, Any]:
    suffix = uuid.uuid4().hex[:8]
    source, copies, counts = f"waits-in-{suffix}", f"waits-copy-{suffix}", f"waits-count-{suffix}"
    ensure_topics(make_admin(settings), [TopicSpec(t, PARTITIONS) for t in (source, copies, counts)])
    copy = Pipeline(f"waits-copy-{suffix}", tenant="t", latency_target="250ms")
    copy.source(source, value=Reading).map(stamp).sink(copies)
    count = Pipeline(f"waits-count-{suffix}", tenant="t", latency_target="2s")
    (
        count.source(source, value=Reading, key=str, timestamp="sent", max_out_of_orderness=0.2)
        .window(Tumbling("1s"))
        .count()
        .sink(counts)
    )
    worker = Worker([copy, count], settings, group=f"waits-{suffix}", policy="cameo")
    thread = threading.Thread(target=worker.run, name="worker", daemon=True)
    thread.start()
    if not worker.wait_assigned(60):
        worker.stop()
        raise SystemExit("the worker got no partitions within 60 s")
    here = str(Path(__file__).resolve())
    bootstrap = settings.bootstrap_servers
    reader = subprocess.Popen(
        [sys.executable, here, "--read", copies, "--bootstrap", bootstrap, "--seconds", str(seconds + 3)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert reader.stdout is not None
    if reader.stdout.readline().strip() != "ready":
        raise SystemExit("the reader did not start")
    rate_and_length = ("--rate", str(rate), "--seconds", str(seconds))
    commit_ms, cpu, t0 = worker.counters.commit_ms, os.times(), time.monotonic()
    producer = subprocess.run(
        [sys.executable, here, "--produce", source, "--bootstrap", bootstrap, *rate_and_length],
        capture_output=True,
        text=True,
        check=True,
    )
    wall = time.monotonic() - t0
    cpu_end = os.times()
    spent_ms = worker.counters.commit_ms - commit_ms
    read = json.loads(reader.communicate(timeout=60)[0].strip().splitlines()[-1])
    latencies = [latency for at, latency in read if at >= WARMUP_S]
    by_second: dict[int, list[float]] = {}
    for at, latency in read:
        by_second.setdefault(int(at), []).append(latency)
    worker.stop()
    thread.join(30)
    if not latencies:
        raise SystemExit("no results were read")
    return {
        "benchmark": "worker_waits",
        "rate": rate,
        "seconds": seconds,
        "sent": int(producer.stdout.split()[-1]),
        "results_read": len(latencies),
        "checkpoint_share": round(spent_ms / 1000.0 / wall, 4),
        "worker_cpu_share": round((cpu_end.user + cpu_end.system - cpu.user - cpu.system) / wall, 4),
        "latency_ms": {
            "p50": round(quantile(latencies, 0.5), 1),
            "p99": round(quantile(latencies, 0.99), 1),
            "max": round(max(latencies), 1),
        },
        "p99_ms_by_second": [round(quantile(by_second[s], 0.99), 1) for s in sorted(by_second)],
        "worker_counters": worker.counters.snapshot(),
        **environment(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--rate", type=float, default=1000.0, help="input records per second")
    parser.add_argument("--seconds", type=float, default=20.0, help="length of the live input")
    parser.add_argument("--bootstrap", default=None, help="an existing broker instead of the embedded one")
    parser.add_argument("--produce", metavar="TOPIC", help=argparse.SUPPRESS)  # the input child
    parser.add_argument("--read", metavar="TOPIC", help=argparse.SUPPRESS)  # the reader child
    args = parser.parse_args()
    if args.produce:
        produce_live(args.bootstrap, args.produce, args.rate, args.seconds)
        return
    if args.read:
        read_latencies(args.bootstrap, args.read, args.seconds)
        return
    if args.bootstrap:
        result = run(KafkaSettings.load(bootstrap_servers=args.bootstrap), args.rate, args.seconds)
    else:
        with EmbeddedBroker() as broker:
            settings = KafkaSettings.load(bootstrap_servers=broker.bootstrap_servers)
            result = run(settings, args.rate, args.seconds)
    path = write_result(args.out, "worker_waits.json", result)
    latency = result["latency_ms"]
    print(
        f"checkpoint share {result['checkpoint_share']:.1%}, worker CPU {result['worker_cpu_share']:.1%}, "
        f"latency p50 {latency['p50']} / p99 {latency['p99']} / max {latency['max']} ms "
        f"({result['results_read']} results); written to {path}"
    )


if __name__ == "__main__":
    main()
