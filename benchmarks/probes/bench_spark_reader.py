"""Records/s of the cadenza-kafka reader alone: an availableNow query into Spark's noop sink.

The stats job's throughput mixes the reader with decoding and windowing; this isolates the reader,
so a change to it shows in one number. The topic is filled before Spark is timed and the session is
started (and one small query run) before the clock starts, so JVM and Python worker start-up are
excluded. Uses CADENZA_TEST_BOOTSTRAP if set, else the embedded broker.

    PYTHONPATH=$PWD /work/main/.venv/bin/python benchmarks/probes/bench_spark_reader.py \
        --out benchmarks/results
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

# The scenarios' modules (``_common``, ``bench_hot_path``, ...) are in ../scenarios.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scenarios"))

from _common import environment, write_result

from cadenza.infra.kafka.clients import flush_or_raise, make_admin, make_producer
from cadenza.infra.kafka.topics import TopicSpec, ensure_topics
from cadenza.infra.spark import register, spark_session
from cadenza.infra.spark.datasource import kafka_options
from cadenza.settings import KafkaSettings
from cadenza.testing.brokers import provide_test_broker

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def produce(settings: KafkaSettings, topic: str, count: int, size: int, partitions: int) -> None:
    producer, errors = make_producer(settings, **{"linger.ms": 20, "batch.num.messages": 10_000})
    for i in range(count):
        value = i.to_bytes(8, "big") * (size // 8) + b"x" * (size % 8)
        while True:
            try:
                producer.produce(topic, value, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.1)
        if i % 1000 == 0:
            producer.poll(0)
    flush_or_raise(producer, None, timeout=120)
    errors.raise_fatal()


def count_topic(spark: SparkSession, settings: KafkaSettings, topic: str, checkpoint: Path) -> int:
    """Run one availableNow query over the whole topic; the number of rows it read."""
    stream = (
        spark.readStream.format("cadenza-kafka")
        .options(**kafka_options(settings))
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("includeHeaders", "false")
        .load()
    )
    query = (
        stream.writeStream.format("noop")
        .trigger(availableNow=True)
        .option("checkpointLocation", str(checkpoint))
        .start()
    )
    query.awaitTermination()
    return sum(int(p["numInputRows"]) for p in query.recentProgress)


def bench(
    spark: SparkSession,
    settings: KafkaSettings,
    *,
    count: int,
    size: int,
    partitions: int,
    repeat: int,
    tmp: Path,
) -> dict[str, object]:
    topic = f"bench-reader-{uuid.uuid4().hex[:6]}"
    ensure_topics(make_admin(settings), [TopicSpec(topic, partitions=partitions)])
    started = time.perf_counter()
    produce(settings, topic, count, size, partitions)
    produce_s = time.perf_counter() - started
    warm = f"bench-reader-warm-{uuid.uuid4().hex[:6]}"
    ensure_topics(make_admin(settings), [TopicSpec(warm, partitions=partitions)])
    produce(settings, warm, 1000, size, partitions)
    count_topic(spark, settings, warm, tmp / "warm")
    rates: list[float] = []
    for run in range(repeat):
        started = time.perf_counter()
        read = count_topic(spark, settings, topic, tmp / f"run{run}")
        elapsed = time.perf_counter() - started
        if read != count:
            raise SystemExit(f"the query read {read} records of {count}")
        rates.append(count / elapsed)
    return {
        "records": count,
        "value_bytes": size,
        "partitions": partitions,
        "produce_s": round(produce_s, 2),
        "records_per_s_best": round(max(rates)),
        "records_per_s_median": round(statistics.median(rates)),
        "runs": [round(r) for r in rates],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, help="directory for spark_reader.json")
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--size", type=int, default=100, help="value bytes per record")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    with provide_test_broker() as broker, tempfile.TemporaryDirectory() as tmp:
        spark = spark_session("cadenza-bench-reader", master=args.master, ui=False)
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)
        try:
            result: dict[str, object] = {
                **environment(),
                "broker": broker.kind,
                "master": args.master,
                "reader": bench(
                    spark,
                    broker.settings,
                    count=args.records,
                    size=args.size,
                    partitions=args.partitions,
                    repeat=args.repeat,
                    tmp=Path(tmp),
                ),
            }
        finally:
            spark.stop()
    print(f"cadenza-kafka reader: {result['reader']}")
    if args.out is not None:
        write_result(args.out, "spark_reader.json", result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
