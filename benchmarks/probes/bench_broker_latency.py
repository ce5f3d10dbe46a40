"""What a broker adds to a record's latency: produce acknowledgement, and fetch wait.

Produces one record every 100 ms (``linger.ms`` 5, ``acks=all``, idempotent: the worker's producer
settings) and reads them with a consumer at each ``fetch.wait.max.ms`` given. Prints, per setting,
the produce-to-acknowledgement latency librdkafka measured and the produce-to-consume latency. A
broker that completes a parked fetch when data arrives shows the same consume latency for every
wait; one that holds the fetch for its whole wait shows about half the wait. Records sent in the first
``WARMUP_S`` seconds are left out (the consumer's first fetches of a new topic).

    python benchmarks/probes/bench_broker_latency.py [--waits 500,20] [--bootstrap host:port]
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
import uuid
from pathlib import Path

# The scenarios' modules (``_common``, ``bench_hot_path``, ...) are in ../scenarios.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scenarios"))

from _common import quantile
from confluent_kafka import Consumer, KafkaError, Message

from cadenza.infra.broker.embedded import EmbeddedBroker
from cadenza.infra.kafka.clients import make_admin, make_producer
from cadenza.infra.kafka.topics import TopicSpec, ensure_topics
from cadenza.settings import KafkaSettings

RECORDS = 100
SPACING_S = 0.1
#: Records sent in the first seconds are left out (the consumer's first fetches of a new topic).
WARMUP_S = 3.0


def measure(settings: KafkaSettings, wait_ms: int) -> tuple[list[float], list[float]]:
    """(acknowledgement latencies, produce-to-consume latencies), ms."""
    topic = f"broker-latency-{uuid.uuid4().hex[:8]}"
    ensure_topics(make_admin(settings), [TopicSpec(topic, 1)])
    producer, _ = make_producer(settings)
    acks: list[float] = []

    def delivered(error: KafkaError | None, message: Message) -> None:
        latency = message.latency()
        if error is None and latency is not None:
            acks.append(latency * 1000.0)

    consumer = Consumer(
        {
            **settings.client_config(),
            "group.id": f"broker-latency-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": wait_ms,
        }
    )
    consumer.subscribe([topic])
    deadline = time.monotonic() + 20
    while not consumer.assignment() and time.monotonic() < deadline:
        consumer.poll(0.1)

    def produce() -> None:
        for _ in range(RECORDS):
            producer.produce(topic, str(time.time()).encode(), on_delivery=delivered)
            producer.poll(0)
            time.sleep(SPACING_S)
        producer.flush(10)

    thread = threading.Thread(target=produce)
    started = time.time()
    thread.start()
    consumed: list[float] = []
    deadline = time.monotonic() + RECORDS * SPACING_S + 10
    while len(consumed) < RECORDS and time.monotonic() < deadline:
        message = consumer.poll(0.05)
        if message is not None and message.error() is None:
            sent = float(message.value() or b"0")
            consumed.append((time.time() - sent) * 1000.0 if sent - started >= WARMUP_S else -1.0)
    thread.join()
    consumer.close()
    return acks, [latency for latency in consumed if latency >= 0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--waits", default="500,20", help="fetch.wait.max.ms values, comma-separated")
    parser.add_argument("--bootstrap", default=None, help="an existing broker instead of the embedded one")
    args = parser.parse_args()
    waits = [int(w) for w in args.waits.split(",")]

    def report(settings: KafkaSettings) -> None:
        for wait in waits:
            acks, consumed = measure(settings, wait)
            print(
                f"fetch.wait.max.ms={wait}: acknowledgement p50 {quantile(acks, 0.5):.1f} / p99 "
                f"{quantile(acks, 0.99):.1f} ms; produce to consume p50 {quantile(consumed, 0.5):.1f} / p99 "
                f"{quantile(consumed, 0.99):.1f} ms ({len(consumed)} records)"
            )

    if args.bootstrap:
        report(KafkaSettings.load(bootstrap_servers=args.bootstrap))
    else:
        with EmbeddedBroker() as broker:
            report(KafkaSettings.load(bootstrap_servers=broker.bootstrap_servers))


if __name__ == "__main__":
    main()
