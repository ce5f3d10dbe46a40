"""Does the embedded broker's cost grow with the records it holds, or with the record batches?

For each batch size B: a fresh broker, one partition, filled in steps to each ``--held`` count of
records, B records per produce request (``batch.num.messages`` B, a long linger, so every request
carries exactly B). At each step one record is produced (``acks=1``, timed to its acknowledgement)
and then fetched from the partition's end (a consumer assigned at that record's offset, timed until
it arrives), ``--probes`` times. The fetch waits up to 500 ms: Tansu answers a fetch that it cannot
read within its wait empty (at 1 ms, past 3,000 batches no probe arrived within 10 s; at 0 none ever
does), and it answered these after about half the wait, so what grows above that floor is the cost.
The same records in fewer, larger batches isolate the per-batch cost: a broker that pays per record
shows the same fetch at every B; one that pays per batch shows
it growing with ``held / B``. Writes ``broker-batches.json`` and ``broker-batches.png`` under ``--out``.

    python benchmarks/probes/bench_broker_batches.py --out DIR [--batch 1000,20,2] [--held 20000,60000,120000]
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

from _common import environment, quantile, write_result
from bench_s1 import broker_settings
from confluent_kafka import KafkaError, Message, TopicPartition

from cadenza.infra.kafka.clients import make_admin, make_consumer, make_producer
from cadenza.infra.kafka.topics import TopicSpec, ensure_topics
from cadenza.settings import KafkaSettings

VALUE = b"x" * 100


def fill(settings: KafkaSettings, topic: str, records: int, batch: int) -> None:
    """``records`` more records on ``topic[0]``, ``batch`` to a produce request."""
    producer, _ = make_producer(
        settings,
        **{
            "enable.idempotence": False,
            "acks": "1",
            "linger.ms": 1000,
            "batch.num.messages": batch,
            "queue.buffering.max.messages": 1_000_000,
        },
    )
    failed: list[KafkaError] = []

    def delivered(error: KafkaError | None, _message: Message) -> None:
        if error is not None:
            failed.append(error)

    for i in range(records):
        producer.produce(topic, VALUE, str(i).encode(), partition=0, on_delivery=delivered)
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(120) or failed:
        raise RuntimeError(f"the fill failed: {len(failed)} undelivered, first {failed[:1]}")


def probe(settings: KafkaSettings, topic: str, probes: int) -> tuple[list[float], list[float]]:
    """(produce-to-acknowledgement ms, fetch-at-the-end ms), one of each per probe record."""
    producer, _ = make_producer(settings, **{"enable.idempotence": False, "acks": "1", "linger.ms": 0})
    consumer, _ = make_consumer(settings, f"batches-{uuid.uuid4().hex[:6]}", **{"fetch.wait.max.ms": 500})
    acks: list[float] = []
    fetches: list[float] = []
    offsets: list[int] = []

    def delivered(error: KafkaError | None, message: Message) -> None:
        offset = message.offset()
        if error is None and offset is not None:
            offsets.append(offset)

    try:
        for i in range(probes):
            started = time.perf_counter()
            producer.produce(topic, VALUE, f"probe-{i}".encode(), partition=0, on_delivery=delivered)
            producer.flush(30)
            acks.append((time.perf_counter() - started) * 1000.0)
            if len(offsets) != i + 1:
                raise RuntimeError("a probe record was not acknowledged")
            started = time.perf_counter()
            consumer.assign([TopicPartition(topic, 0, offsets[i])])
            while True:
                message = consumer.poll(10)
                if message is None:
                    raise RuntimeError("a probe record was not fetched within 10 s")
                if message.error() is None and message.offset() == offsets[i]:
                    break
            fetches.append((time.perf_counter() - started) * 1000.0)
            consumer.unassign()
    finally:
        consumer.close()
    return acks, fetches


def run(batch: int, held: Sequence[int], probes: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with broker_settings(None) as settings:
        topic = f"batches-{uuid.uuid4().hex[:8]}"
        ensure_topics(make_admin(settings), [TopicSpec(topic, 1)])
        filled = 0
        for target in held:
            fill(settings, topic, target - filled, batch)
            filled = target
            acks, fetches = probe(settings, topic, probes)
            row = {
                "batch": batch,
                "records": filled,
                "batches": filled // batch,
                "produce_p50_ms": round(quantile(acks, 0.5), 2),
                "fetch_p50_ms": round(quantile(fetches, 0.5), 2),
                "fetch_p90_ms": round(quantile(fetches, 0.9), 2),
            }
            print(
                f"B={batch:5d}  {filled:7d} records in {row['batches']:6d} batches  produce p50 "
                f"{row['produce_p50_ms']:6.1f} ms  fetch p50 {row['fetch_p50_ms']:6.1f} ms  "
                f"p90 {row['fetch_p90_ms']:6.1f} ms",
                flush=True,
            )
            rows.append(row)
    return rows


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for batch in dict.fromkeys(r["batch"] for r in rows):
        mine = [r for r in rows if r["batch"] == batch]
        label = f"{batch} records/batch"
        ax.plot([r["batches"] for r in mine], [r["fetch_p50_ms"] for r in mine], marker="o", label=label)
    ax.set_xscale("symlog", linthresh=100)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("record batches the partition holds")
    ax.set_ylabel("fetch at the partition's end, p50 (ms)")
    ax.set_title("Embedded broker: fetch cost against batches held")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--batch", default="1000,20,2", help="records per produce request, one broker each")
    parser.add_argument("--held", default="20000,60000,120000", help="records held at each measuring step")
    parser.add_argument("--probes", type=int, default=40)
    args = parser.parse_args(argv)
    batches = [int(b) for b in args.batch.split(",")]
    held = sorted(int(h) for h in args.held.split(","))
    rows = [row for batch in batches for row in run(batch, held, args.probes)]
    result = {"environment": environment(), "probes": args.probes, "rows": rows}
    write_result(args.out, "broker-batches.json", result)
    plot(rows, args.out / "broker-batches.png")


if __name__ == "__main__":
    main()
