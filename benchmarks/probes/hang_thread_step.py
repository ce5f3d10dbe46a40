"""A 10 s hang in one tenant's thread step: do the other tenants keep their targets meanwhile?

One worker, two tenants, the embedded broker:

- **steady**: ``map`` to a sink, target 300 ms, ``--rate`` records a second;
- **stuck**: a ``map`` that blocks 50 ms per call, and once (``--hang-at`` seconds in) ``--hang``
  seconds, at 10 records a second, target 1 s; declared ``parallel="auto", executor="thread"``
  (``--system leased``) or as a plain step (``--system inline``).

Each output's latency is when the reader got it minus when its input was sent (both on this host's
clock); a result meets its target if that is at most the tenant's target. Reported: each tenant's
share within target over the whole run and over the hang (inputs sent while the call hung).

    cd benchmarks/probes && python hang_thread_step.py --out DIR [--system leased] [--seconds 30]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scenarios"))

from _common import environment, write_result

from cadenza import Pipeline
from cadenza.infra.broker.embedded import EmbeddedBroker
from cadenza.infra.kafka.clients import make_consumer, make_producer
from cadenza.settings import KafkaSettings
from cadenza.worker import Worker, WorkerConfig

HANG = {"seconds": 10.0}
TARGETS = {"steady": 0.3, "stuck": 1.0}


def passthrough(value: dict[str, Any]) -> dict[str, Any]:
    return value


def blocking(value: dict[str, Any]) -> dict[str, Any]:
    time.sleep(HANG["seconds"] if value.get("hang") else 0.05)
    return value


def pipelines(system: str, suffix: str) -> tuple[list[Pipeline], dict[str, str]]:
    steady = Pipeline(f"steady-{suffix}", tenant="steady", latency_target="300ms")
    steady.source(f"steady-in-{suffix}").map(passthrough).sink(f"steady-out-{suffix}")
    stuck = Pipeline(f"stuck-{suffix}", tenant="stuck", latency_target="1s")
    options: dict[str, Any] = {"parallel": "auto", "executor": "thread"} if system == "leased" else {}
    stuck.source(f"stuck-in-{suffix}").map(blocking, **options).sink(f"stuck-out-{suffix}")
    return [steady, stuck], {f"steady-out-{suffix}": "steady", f"stuck-out-{suffix}": "stuck"}


def run(settings: KafkaSettings, system: str, seconds: float, rate: float, hang_at: float) -> dict[str, Any]:
    suffix = uuid.uuid4().hex[:6]
    declared, outputs = pipelines(system, suffix)
    worker = Worker(
        declared, settings, WorkerConfig(group=f"hang-{suffix}", activities_topic="off", partitions=1)
    )
    received: list[tuple[str, float, dict[str, Any]]] = []
    stop = threading.Event()

    def read() -> None:
        consumer, _ = make_consumer(settings, f"reader-{suffix}", **{"fetch.wait.max.ms": 5})
        consumer.subscribe(list(outputs))
        while not stop.is_set():
            for message in consumer.consume(100, 0.05):
                value = message.value()
                if message.error() is None and value:
                    received.append((outputs[message.topic() or ""], time.time(), json.loads(value)))
        consumer.close()

    thread = threading.Thread(target=worker.run, daemon=True)
    reader = threading.Thread(target=read, daemon=True)
    thread.start()
    reader.start()
    if not worker.wait_assigned(60):
        raise RuntimeError("the worker got no partitions")
    producer, _ = make_producer(settings, **{"linger.ms": 1})
    started = time.time()
    hang_sent: float | None = None
    sent = {"steady": 0, "stuck": 0}
    tick = 0
    while (now := time.time()) < started + seconds:
        tick += 1
        producer.produce(f"steady-in-{suffix}", json.dumps({"sent": now, "i": tick}).encode())
        sent["steady"] += 1
        if tick % max(1, round(rate / 10)) == 0:
            hang = hang_sent is None and now >= started + hang_at
            hang_sent = now if hang else hang_sent
            producer.produce(f"stuck-in-{suffix}", json.dumps({"sent": now, "hang": hang}).encode())
            sent["stuck"] += 1
        producer.poll(0)
        time.sleep(max(0.0, started + tick / rate - time.time()))
    producer.flush(10)
    time.sleep(HANG["seconds"] + 3.0)  # the last results, the hung call's included
    stop.set()
    worker.stop()
    thread.join(30)
    reader.join(10)
    assert hang_sent is not None
    return {
        "system": system,
        "sent": sent,
        "hang_from": hang_sent - started,
        "tenants": {
            tenant: summary(received, tenant, TARGETS[tenant], hang_sent, sent[tenant]) for tenant in TARGETS
        },
    }


def summary(
    received: list[tuple[str, float, dict[str, Any]]], tenant: str, target: float, hang: float, sent: int
) -> dict[str, Any]:
    latencies = [(got - value["sent"], value["sent"]) for name, got, value in received if name == tenant]
    during = [lat for lat, at in latencies if hang <= at <= hang + HANG["seconds"]]
    lats = sorted(lat for lat, _ in latencies)

    def met(values: list[float]) -> float | None:
        return None if not values else sum(1 for v in values if v <= target) / len(values)

    return {
        "results": len(lats),
        "sent": sent,
        "met": met(lats),
        "met_during_hang": met(during),
        "results_during_hang": len(during),
        "p50_ms": None if not lats else round(statistics.median(lats) * 1000, 1),
        "p99_ms": None if not lats else round(lats[min(len(lats) - 1, int(len(lats) * 0.99))] * 1000, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--system", choices=["leased", "inline"], default="leased")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--rate", type=float, default=200.0, help="steady tenant's records a second")
    parser.add_argument("--hang-at", type=float, default=8.0)
    parser.add_argument("--hang", type=float, default=10.0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    HANG["seconds"] = args.hang
    with EmbeddedBroker() as broker:
        settings = KafkaSettings.load(bootstrap_servers=broker.bootstrap_servers)
        result = run(settings, args.system, args.seconds, args.rate, args.hang_at)
    result.update(benchmark="hang_thread_step", hang_s=args.hang, rate=args.rate, **environment())
    write_result(args.out, f"hang_thread_step-{args.system}.json", result)
    for tenant, row in result["tenants"].items():
        print(
            f"{args.system} {tenant}: met {row['met']} over the run, "
            f"{row['met_during_hang']} during the hang "
            f"({row['results_during_hang']} results), p50 {row['p50_ms']} ms, p99 {row['p99_ms']} ms, "
            f"{row['results']}/{row['sent']} results"
        )


if __name__ == "__main__":
    main()
