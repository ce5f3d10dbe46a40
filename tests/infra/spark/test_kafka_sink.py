"""The cadenza-kafka sink: a Spark query reads one topic and writes another; a plain consumer checks."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F  # noqa: N812

from cadenza.settings import KafkaSettings
from cadenza.testing.pytest_plugin import NewTopic
from tests.infra.spark.kafka_helpers import consume_all, produce
from tests.infra.spark.streaming import read_stream, start_and_wait

pytestmark = pytest.mark.kafka


def test_query_reads_a_topic_and_writes_transformed_records_to_others(
    spark: SparkSession, kafka_settings: KafkaSettings, new_topic: NewTopic, tmp_path: Path
) -> None:
    """Values upper-cased, keys and headers kept (plus one added), routed by a topic column."""
    source = new_topic(partitions=2, suffix="in")
    evens, odds = new_topic(partitions=2, suffix="even"), new_topic(partitions=1, suffix="odd")
    produced = produce(
        kafka_settings,
        source,
        [
            (i % 2, f"k{i}".encode() if i % 3 else None, f"value-{i}".encode(), [("seq", str(i).encode())])
            for i in range(40)
        ],
        batched=True,
    )

    df = read_stream(
        spark, kafka_settings, subscribe=source, startingOffsets="earliest", maxRecordsPerTrigger="15"
    )
    seq = F.expr("CAST(CAST(headers[0].value AS STRING) AS INT)")
    out = df.select(
        F.col("key"),
        F.upper(F.col("value").cast("string")).alias("value"),
        F.concat(
            F.col("headers"), F.array(F.struct(F.lit("via").alias("key"), F.lit(b"spark").alias("value")))
        ).alias("headers"),
        F.when(seq % 2 == 0, F.lit(evens)).otherwise(F.lit(odds)).alias("topic"),
    )
    start_and_wait(
        out.writeStream.format("cadenza-kafka")
        .option("kafka.bootstrap.servers", kafka_settings.bootstrap_servers)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
    )

    for topic, parity, partitions in ((evens, 0, 2), (odds, 1, 1)):
        expected = Counter(
            (r.key, (r.value or b"").upper(), (*r.headers, ("via", b"spark")))
            for r in produced
            if int(r.headers[0][1] or b"0") % 2 == parity
        )
        got = Counter((r.key, r.value, r.headers) for r in consume_all(kafka_settings, topic, partitions))
        assert got == expected, topic
        assert sum(got.values()) == 20


def test_topic_option_string_key_and_partition_column(
    spark: SparkSession, kafka_settings: KafkaSettings, new_topic: NewTopic, tmp_path: Path
) -> None:
    """The batch writer too: string key and value, an explicit partition, the topic from the option."""
    target = new_topic(partitions=3)
    rows = [(f"key-{i}", f"v{i}", i % 3) for i in range(12)]
    df = spark.createDataFrame(rows, "key string, value string, partition int")
    (
        df.write.format("cadenza-kafka")
        .option("kafka.bootstrap.servers", kafka_settings.bootstrap_servers)
        .option("topic", target)
        .mode("append")
        .save()
    )
    got = Counter((r.partition, r.key, r.value, r.headers) for r in consume_all(kafka_settings, target, 3))
    assert got == Counter((p, k.encode(), v.encode(), ()) for k, v, p in rows)


def test_undeliverable_records_fail_the_batch(
    spark: SparkSession, kafka_settings: KafkaSettings, new_topic: NewTopic, tmp_path: Path
) -> None:
    """A sink that cannot reach its cluster fails the micro-batch instead of marking it done."""
    source = new_topic(partitions=1)
    produce(kafka_settings, source, [(0, None, b"x", [])], batched=False)
    df = read_stream(spark, kafka_settings, subscribe=source, startingOffsets="earliest")
    writer = (
        df.select("value")
        .writeStream.format("cadenza-kafka")
        .option("kafka.bootstrap.servers", "127.0.0.1:1")  # nothing listens on port 1
        .option("kafka.delivery.timeout.ms", "1500")
        .option("topic", "unreachable")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
    )
    with pytest.raises(StreamingQueryException) as caught:
        start_and_wait(writer)
    assert "1 record(s) were not delivered" in str(caught.value)
    # The batch was not committed: nothing in the commit log for batch 0.
    assert not (tmp_path / "checkpoint" / "commits" / "0").exists()


def test_unusable_columns_are_refused_when_the_query_starts(
    spark: SparkSession, kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    df = read_stream(spark, kafka_settings, subscribe="never-read").selectExpr(
        "CAST(value AS STRING) AS body"
    )
    writer = (
        df.writeStream.format("cadenza-kafka")
        .option("kafka.bootstrap.servers", kafka_settings.bootstrap_servers)
        .option("topic", "never-written")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
    )
    with pytest.raises(Exception) as caught:  # Spark wraps it; the message is the point
        start_and_wait(writer)
    assert "cadenza-kafka sink needs a value column (string or binary); the input has body" in str(
        caught.value
    )
