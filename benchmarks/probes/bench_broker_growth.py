"""Does the embedded broker slow down with what it holds? CPU, RSS and the earliest offset over time.

Produces ``--rate`` records/s (100 bytes) to a 4-partition topic created with ``retention.ms`` 20 s
(and ``segment.ms`` 5 s), read continuously by ``--readers`` consumers in a group (each fetching with
``--fetch-wait-ms``: an empty fetch is asked again after it), and prints every 10 s the
broker process's CPU (cores) and RSS and partition 0's low and high offsets: a broker that applied
retention would move the low offset; one whose work per request grows with the data held shows its
CPU climbing at a constant rate. Linux only (reads ``/proc``).

``--linger-ms`` is the producer's ``linger.ms``: at a few hundred records/s, 5 ms makes batches of one
or two records, 100 ms batches of tens (the broker pays per batch: ``bench_broker_batches.py``).

    python benchmarks/probes/bench_broker_growth.py [--seconds 120] [--rate 1000] [--readers 1]
        [--fetch-wait-ms 500] [--linger-ms 5]
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

# The scenarios' modules (``_common``, ``bench_hot_path``, ...) are in ../scenarios.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scenarios"))

from bench_s1 import broker_settings
from confluent_kafka import TopicPartition

from cadenza.infra.kafka.clients import make_admin, make_consumer, make_producer
from cadenza.infra.kafka.topics import TopicSpec, ensure_topics

TOPIC = "growth"


def broker_pid() -> int:
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if b"tansu-v" in f.read():
                        return int(entry)
            except OSError:
                continue
    raise RuntimeError("no embedded broker (tansu) process found")


def cpu_and_rss(pid: int) -> tuple[float, float]:
    """CPU seconds used so far and resident MiB of ``pid``."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().split(")")[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return cpu, int(fields[21]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=120)
    parser.add_argument("--rate", type=float, default=1000.0)
    parser.add_argument(
        "--fetch-wait-ms", type=int, default=500, help="the readers' fetch.wait.max.ms (librdkafka's default)"
    )
    parser.add_argument("--readers", type=int, default=1, help="consumers in the reading group")
    parser.add_argument("--linger-ms", type=int, default=5, help="the producer's linger.ms")
    args = parser.parse_args(argv)
    with broker_settings(None) as settings:
        configs = {"retention.ms": "20000", "segment.ms": "5000"}
        ensure_topics(make_admin(settings), [TopicSpec(TOPIC, 4, configs=configs)])
        stop = threading.Event()

        def load() -> None:
            producer, _ = make_producer(settings, **{"linger.ms": args.linger_ms})
            sent, started = 0, time.monotonic()
            while not stop.is_set():
                while sent < (time.monotonic() - started) * args.rate:
                    producer.produce(TOPIC, b"x" * 100, str(sent).encode())
                    sent += 1
                producer.poll(0)
                time.sleep(0.01)

        def read() -> None:
            consumer, _ = make_consumer(
                settings, "growth-reader", **{"fetch.wait.max.ms": args.fetch_wait_ms}
            )
            consumer.subscribe([TOPIC])
            while not stop.is_set():
                consumer.consume(500, 0.1)
            consumer.close()

        threads = [threading.Thread(target=load, daemon=True)]
        threads += [threading.Thread(target=read, daemon=True) for _ in range(args.readers)]
        for thread in threads:
            thread.start()
        pid = broker_pid()
        last, _ = cpu_and_rss(pid)
        for elapsed in range(10, args.seconds + 1, 10):
            time.sleep(10)
            cpu, rss = cpu_and_rss(pid)
            probe, _ = make_consumer(settings, "growth-probe")
            low, high = probe.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=10)
            probe.close()
            print(
                f"{elapsed:4d} s  broker cpu {(cpu - last) / 10:.2f} cores  rss {rss:.0f} MiB  "
                f"p0 low {low} high {high}"
            )
            last = cpu
        stop.set()
        for thread in threads:
            thread.join(15)


if __name__ == "__main__":
    main()
