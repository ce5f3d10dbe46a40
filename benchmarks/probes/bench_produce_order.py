"""Does the order in which a producer is handed records change how many produce requests carry them?

S1 measured a ``cameo`` worker sending 23-69% more produce requests than a ``fifo`` one for the same
records (``benchmarks/results/2026-11-29/NOTES.md``, "What the worker asks of the broker per
policy"). The suspected mechanism is librdkafka's linger, which runs per partition: a partition's
batch is sent ``linger.ms`` after its first record, so records that reach many partitions spread
over time (short quanta of several tenants, interleaved) fall due one batch after another, where
long runs of one partition's records fill its batch at once. This isolates that: one producer with
cadenza's settings (idempotent, ``acks=all``, the linger asked for) is handed the same records at
the same paced rate over ``--partitions`` partitions of a fresh embedded broker, in runs of
``--run`` consecutive records per partition or round-robin, and the ``Produce`` requests it sent
(librdkafka's statistics) and the broker's CPU are counted. Writes ``produce-order.json`` and
``produce-order.png`` under ``--out``.

    python benchmarks/probes/bench_produce_order.py --out DIR [--rate 1000] [--seconds 10] [--linger 5,20]
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# The scenarios' modules (``_common``, ``bench_hot_path``, ...) are in ../scenarios.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scenarios"))

from _common import environment, write_result
from confluent_kafka import KafkaError, Message

from cadenza.demo.machine import process_cpu_seconds
from cadenza.demo.s1_process import broker_with_pid
from cadenza.infra.kafka.clients import make_admin, make_producer
from cadenza.infra.kafka.topics import TopicSpec, ensure_topics
from cadenza.settings import KafkaSettings

VALUE = b"x" * 100
ORDERS = ("runs", "round-robin")


def partition_of(order: str, index: int, partitions: int, run: int) -> int:
    """The partition of the ``index``-th record: ``run`` in a row per partition, or one each in turn."""
    return (index // run) % partitions if order == "runs" else index % partitions


def produce_paced(
    settings: KafkaSettings,
    broker_pid: int | None,
    order: str,
    *,
    partitions: int,
    run: int,
    rate: float,
    seconds: float,
    linger: int,
) -> dict[str, Any]:
    topic = f"order-{uuid.uuid4().hex[:8]}"
    ensure_topics(make_admin(settings), [TopicSpec(topic, partitions)])
    producer, errors = make_producer(settings, **{"linger.ms": linger, "statistics.interval.ms": 200})
    failed: list[KafkaError] = []

    def delivered(error: KafkaError | None, _message: Message) -> None:
        if error is not None:
            failed.append(error)

    producer.flush(10)
    time.sleep(0.5)  # a statistics report before the first record: the baseline of the counts
    producer.poll(0)
    before = errors.requests.get("Produce", 0)
    cpu_before = process_cpu_seconds(broker_pid)
    records = round(rate * seconds)
    start = time.perf_counter()
    for index in range(records):
        due = start + index / rate
        wait = due - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        producer.produce(
            topic, VALUE, partition=partition_of(order, index, partitions, run), on_delivery=delivered
        )
        producer.poll(0)
    if producer.flush(60) or failed:
        raise RuntimeError(f"{len(failed)} record(s) not delivered, first {failed[:1]}")
    elapsed = time.perf_counter() - start
    cpu_after = process_cpu_seconds(broker_pid)
    time.sleep(0.5)  # the next statistics report counts the last requests
    producer.poll(0)
    requests = errors.requests.get("Produce", 0) - before
    return {
        "order": order,
        "linger_ms": linger,
        "records": records,
        "seconds": round(elapsed, 2),
        "produce_requests": requests,
        "records_per_request": round(records / requests, 2) if requests else None,
        "broker_cpu_s": None if cpu_before is None or cpu_after is None else round(cpu_after - cpu_before, 2),
    }


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    lingers = sorted({r["linger_ms"] for r in rows})
    fig, ax = plt.subplots(figsize=(6.5, 4))
    width = 0.8 / len(ORDERS)
    for i, order in enumerate(ORDERS):
        values = [
            sum(r["produce_requests"] for r in rows if r["order"] == order and r["linger_ms"] == linger)
            / max(1, sum(1 for r in rows if r["order"] == order and r["linger_ms"] == linger))
            for linger in lingers
        ]
        ax.bar([x + i * width for x in range(len(lingers))], values, width, label=order)
    ax.set_xticks([x + width / 2 for x in range(len(lingers))], [f"linger {ms} ms" for ms in lingers])
    ax.set_ylabel("produce requests (mean of repetitions)")
    ax.set_title("The same records, handed over in runs or round-robin")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--partitions", type=int, default=20)
    parser.add_argument("--run", type=int, default=50, help="records in a row per partition for 'runs'")
    parser.add_argument("--rate", type=float, default=1000.0, help="records per second")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--linger", default="5,20", help="linger.ms values, comma-separated")
    parser.add_argument("--repetitions", type=int, default=2)
    args = parser.parse_args(argv)
    rows: list[dict[str, Any]] = []
    with broker_with_pid(None) as (settings, pid):
        for repetition in range(args.repetitions):
            for linger in (int(ms) for ms in args.linger.split(",")):
                for order in ORDERS:
                    row = produce_paced(
                        settings,
                        pid,
                        order,
                        partitions=args.partitions,
                        run=args.run,
                        rate=args.rate,
                        seconds=args.seconds,
                        linger=linger,
                    )
                    row["repetition"] = repetition + 1
                    print(
                        f"linger {linger:3d} ms  {order:12s}  {row['produce_requests']:6d} produce requests  "
                        f"{row['records_per_request']} records each  broker CPU {row['broker_cpu_s']} s",
                        flush=True,
                    )
                    rows.append(row)
    config = {k: getattr(args, k) for k in ("partitions", "run", "rate", "seconds", "linger", "repetitions")}
    write_result(
        args.out, "produce-order.json", {"environment": environment(), "config": config, "rows": rows}
    )
    plot(rows, args.out / "produce-order.png")


if __name__ == "__main__":
    main()
