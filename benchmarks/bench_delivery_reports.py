"""What serving delivery reports costs the producing thread, per record, against a real broker.

A worker produces every result with a per-record delivery callback (its output epoch counts the
record acknowledged, so that checkpoints need not flush; :mod:`cadenza.worker.output`), and serves the
reports with ``poll(0)`` between its quanta. A stack sample of S3 put 24-34 % of the worker's wall time
in that serving (RESULTS.md, S3). This measures the producing thread's CPU time (``thread_time``: the
callbacks run on the thread that polls; librdkafka's own threads are not counted) to produce
``--records`` records and serve their reports until all are acknowledged, three ways, in alternating
rounds on one producer each:

- ``per_record``: ``on_delivery`` on every ``produce`` (what the worker does);
- ``producer_level``: one ``on_delivery`` in the producer's configuration;
- ``none``: no delivery callback at all (acknowledgements are then only countable by ``flush``).

    cd benchmarks && python bench_delivery_reports.py --out DIR
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import machine_and_commit, write_result
from confluent_kafka import KafkaError, Message, Producer

from cadenza.demo.s1 import broker_settings
from cadenza.infra.kafka.clients import make_admin, producer_config
from cadenza.infra.kafka.topics import TopicSpec, ensure_topics
from cadenza.settings import KafkaSettings

VARIANTS = ("per_record", "producer_level", "none")
PARTITIONS = 4


class _Count:
    __slots__ = ("acked",)

    def __init__(self) -> None:
        self.acked = 0

    def delivered(self, error: KafkaError | None, message: Message) -> None:
        self.acked += 1


def one_round(settings: KafkaSettings, topic: str, variant: str, records: int) -> dict[str, float]:
    """Produce ``records`` records and serve their reports; the producing thread's CPU per record."""
    count = _Count()
    overrides: dict[str, Any] = {"queue.buffering.max.messages": 2 * records}
    if variant == "producer_level":
        overrides["on_delivery"] = count.delivered
    config, _errors = producer_config(settings, **overrides)
    producer = Producer(config)
    value = b"v" * 100
    key = b"k"
    produce = producer.produce
    callback: Callable[[KafkaError | None, Message], None] | None = (
        count.delivered if variant == "per_record" else None
    )
    cpu = time.thread_time
    wall = time.perf_counter
    started_cpu, started_wall = cpu(), wall()
    if callback is None:
        for _ in range(records):
            produce(topic, value, key)
    else:
        for _ in range(records):
            produce(topic, value, key, on_delivery=callback)
    produced_cpu = cpu()
    left = producer.flush(60)  # serves every report on this thread
    done_cpu, done_wall = cpu(), wall()
    if left:
        raise RuntimeError(f"{left} records not acknowledged within 60 s")
    if variant != "none" and count.acked != records:
        raise RuntimeError(f"{count.acked} of {records} reports served")
    return {
        "produce_ns": (produced_cpu - started_cpu) / records * 1e9,
        "serve_ns": (done_cpu - produced_cpu) / records * 1e9,
        "total_ns": (done_cpu - started_cpu) / records * 1e9,
        "wall_s": done_wall - started_wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--bootstrap", default=None, help="an existing broker instead of the embedded one")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    if args.records < 1 or args.rounds < 1:
        parser.error("--records and --rounds must be at least 1")
    rounds: dict[str, list[dict[str, float]]] = {variant: [] for variant in VARIANTS}
    with broker_settings(args.bootstrap) as settings:
        topic = f"bench-reports-{uuid.uuid4().hex[:8]}"
        admin = make_admin(settings)
        ensure_topics(admin, [TopicSpec(topic, partitions=PARTITIONS)])
        one_round(settings, topic, "per_record", min(args.records, 10_000))  # warm-up: metadata, connection
        for index in range(args.rounds):
            order = VARIANTS[index % 3 :] + VARIANTS[: index % 3]
            for variant in order:
                rounds[variant].append(one_round(settings, topic, variant, args.records))
    medians = {
        variant: {key: round(statistics.median(r[key] for r in runs), 1) for key in runs[0]}
        for variant, runs in rounds.items()
    }
    for variant, median in medians.items():
        print(
            f"{variant:>15}: producing thread CPU per record {median['total_ns']:.0f} ns "
            f"(produce {median['produce_ns']:.0f}, serving reports {median['serve_ns']:.0f}); "
            f"wall {median['wall_s']:.2f} s"
        )
    write_result(
        args.out,
        "delivery-reports.json",
        {
            "benchmark": "delivery_reports",
            "records": args.records,
            "rounds": args.rounds,
            "medians": medians,
            "all_rounds": rounds,
            **machine_and_commit(),
        },
    )


if __name__ == "__main__":
    main()
