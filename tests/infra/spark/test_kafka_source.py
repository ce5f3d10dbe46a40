"""The cadenza-kafka streaming source on local Spark, against the real test broker."""

from __future__ import annotations

import json
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession

from cadenza.infra.kafka.clients import make_admin
from cadenza.infra.kafka.topics import TopicSpec, delete_topics, ensure_topics
from cadenza.infra.spark.kafka_source import source_schema
from cadenza.settings import KafkaSettings
from cadenza.testing.pytest_plugin import NewTopic
from tests.infra.spark.kafka_helpers import produce
from tests.infra.spark.streaming import Batches, read_stream, run_available_now, to_record

pytestmark = pytest.mark.kafka

Produced = list[tuple[int, bytes | None, bytes, list[tuple[str, bytes]]]]


def records(prefix: str, count: int, partitions: int) -> Produced:
    """Records spread round-robin over partitions; every fifth has a null key; all carry headers."""
    return [
        (
            i % partitions,
            None if i % 5 == 0 else f"{prefix}-k{i}".encode(),
            f"{prefix}-{i}".encode(),
            [("seq", str(i).encode()), ("run", prefix.encode()), ("empty", b"")],
        )
        for i in range(count)
    ]


def test_source_reads_exactly_the_produced_records(
    spark: SparkSession, kafka_settings: KafkaSettings, new_topic: NewTopic, tmp_path: Path
) -> None:
    """Keys, values, headers, partitions, offsets and timestamps of single- and multi-record batches.

    The lingering producer packs ~30 records per broker batch; a source trusting the high watermark
    of a broker that under-reports it (Tansu) would stop after the first record of the last batch.
    """
    topic = new_topic(partitions=3)
    before = datetime.now(UTC) - timedelta(seconds=5)
    expected = produce(kafka_settings, topic, records("single", 6, 3), batched=False)
    expected += produce(kafka_settings, topic, records("batched", 90, 3), batched=True)

    df = read_stream(spark, kafka_settings, subscribe=topic, startingOffsets="earliest")
    assert df.schema == source_schema()
    batches = run_available_now(df, tmp_path / "checkpoint")

    assert batches.records() == sorted(expected)
    rows = [row for _, rows in batches.seen for row in rows]
    after = datetime.now(UTC) + timedelta(seconds=5)
    assert all(before <= row.timestamp.replace(tzinfo=UTC) <= after for row in rows)
    assert {row.timestampType for row in rows} == {0}  # CreateTime
    assert {row.partition for row in rows} == {0, 1, 2}


def test_restart_from_checkpoint_neither_skips_nor_repeats(
    spark: SparkSession, kafka_settings: KafkaSettings, new_topic: NewTopic, tmp_path: Path
) -> None:
    """Across a crash mid-batch and a later restart, every record is processed exactly once.

    Run 1 dies inside its second micro-batch (after seeing it, before Spark marks it done). Run 2
    replays that batch from the checkpoint (it must hold the very same records) and finishes. Run 3,
    after more records arrive, sees exactly the new ones. maxRecordsPerTrigger forces several
    micro-batches per run.
    """
    topic = new_topic(partitions=3)
    first = produce(kafka_settings, topic, records("first", 60, 3), batched=True)
    checkpoint = tmp_path / "checkpoint"
    df = read_stream(
        spark, kafka_settings, subscribe=topic, startingOffsets="earliest", maxRecordsPerTrigger="25"
    )

    run1 = Batches()
    with pytest.raises(StreamingQueryException, match="injected failure in batch 1"):
        run_available_now(df, checkpoint, fail_in_batch=1, batches=run1)
    assert [batch_id for batch_id, _ in run1.seen] == [0, 1]

    run2 = run_available_now(df, checkpoint)
    assert run2.seen[0][0] == 1, "the restart must replay the batch that failed"
    assert sorted(map(to_record, run2.seen[0][1])) == sorted(map(to_record, run1.seen[1][1]))
    processed = sorted([to_record(row) for row in run1.seen[0][1]] + run2.records())
    assert processed == sorted(first)
    sizes = [len(rows) for _, rows in run1.seen + run2.seen]
    assert max(sizes) <= 25
    assert len([size for size in sizes if size]) >= 3

    second = produce(kafka_settings, topic, records("second", 45, 3), batched=True)
    run3 = run_available_now(df, checkpoint)
    assert run3.records() == sorted(second)
    assert min(batch_id for batch_id, _ in run3.seen) > max(batch_id for batch_id, _ in run2.seen)
    assert max(len(rows) for _, rows in run3.seen) <= 25
    assert len(run3.non_empty()) >= 2


def test_starting_offsets_json_selects_per_partition_positions(
    spark: SparkSession, kafka_settings: KafkaSettings, new_topic: NewTopic, tmp_path: Path
) -> None:
    """A concrete offset, -2 (earliest) and -1 (latest), each on its own partition."""
    topic = new_topic(partitions=3)
    produced = produce(kafka_settings, topic, records("json", 30, 3), batched=True)
    starting = json.dumps({topic: {"0": 4, "1": -2, "2": -1}})
    df = read_stream(spark, kafka_settings, subscribe=topic, startingOffsets=starting)
    got = run_available_now(df, tmp_path / "checkpoint").records()
    assert got == [r for r in produced if (r.partition == 0 and r.offset >= 4) or r.partition == 1]


def test_subscribe_pattern_reads_matching_topics_and_picks_up_new_ones_from_earliest(
    spark: SparkSession, kafka_settings: KafkaSettings, new_topic: NewTopic, tmp_path: Path
) -> None:
    """Only topics matching the pattern are read; one created later is read from its first record."""
    token = uuid.uuid4().hex[:6]
    matching = [
        new_topic(partitions=2, suffix=f"{token}-in-a"),
        new_topic(partitions=1, suffix=f"{token}-in-b"),
    ]
    other = new_topic(partitions=1, suffix=f"{token}-out")
    expected = []
    for topic in matching:
        expected += produce(
            kafka_settings, topic, records(topic, 8, 2 if topic == matching[0] else 1), batched=True
        )
    produce(kafka_settings, other, records(other, 8, 1), batched=True)
    checkpoint = tmp_path / "checkpoint"
    df = read_stream(
        spark,
        kafka_settings,
        subscribePattern=f".*-{token}-in-[a-z]-[0-9a-f]{{8}}",
        startingOffsets="earliest",
    )
    assert run_available_now(df, checkpoint).records() == sorted(expected)

    late = new_topic(partitions=2, suffix=f"{token}-in-c")
    more = produce(kafka_settings, late, records(late, 6, 2), batched=True)
    more += produce(kafka_settings, matching[1], records("more", 3, 1), batched=True)
    assert run_available_now(df, checkpoint).records() == sorted(more)


def test_latest_start_reads_only_records_produced_after_the_query_started(
    spark: SparkSession, kafka_settings: KafkaSettings, new_topic: NewTopic, tmp_path: Path
) -> None:
    """The default startingOffsets=latest is resolved once and checkpointed, so a restart keeps it."""
    topic = new_topic(partitions=2)
    produce(kafka_settings, topic, records("old", 20, 2), batched=True)
    checkpoint = tmp_path / "checkpoint"
    df = read_stream(spark, kafka_settings, subscribe=topic)
    assert run_available_now(df, checkpoint).records() == []
    new = produce(kafka_settings, topic, records("new", 10, 2), batched=True)
    assert run_available_now(df, checkpoint).records() == new


def test_starting_offsets_missing_a_partition_fails_the_query_at_start(
    spark: SparkSession, kafka_settings: KafkaSettings, new_topic: NewTopic, tmp_path: Path
) -> None:
    topic = new_topic(partitions=2)
    df = read_stream(spark, kafka_settings, subscribe=topic, startingOffsets=json.dumps({topic: {"0": 0}}))
    with pytest.raises(StreamingQueryException) as caught:
        run_available_now(df, tmp_path / "checkpoint")
    assert "startingOffsets must give every partition of the subscribed topics" in str(caught.value)
    assert f"missing: {topic}[1]" in str(caught.value)


def test_a_recreated_topic_fails_the_query_unless_data_loss_is_accepted(
    spark: SparkSession, kafka_settings: KafkaSettings, new_topic: NewTopic, tmp_path: Path
) -> None:
    """A partition that ends before where the query got to means lost records: say so, by default."""
    topic = new_topic()
    produce(kafka_settings, topic, records("before", 10, 1), batched=True)
    checkpoint = tmp_path / "checkpoint"
    df = read_stream(spark, kafka_settings, subscribe=topic, startingOffsets="earliest")
    assert len(run_available_now(df, checkpoint).records()) == 10

    admin = make_admin(kafka_settings)
    delete_topics(admin, [topic])
    wait_until_gone(admin, topic)
    ensure_topics(admin, [TopicSpec(topic)])
    after = produce(kafka_settings, topic, records("after", 3, 1), batched=True)

    with pytest.raises(StreamingQueryException) as caught:
        run_available_now(df, checkpoint)
    assert f"partitions went backwards ({topic}[0] ends at 3 but was read up to 10)" in str(caught.value)
    assert "Set failOnDataLoss=false" in str(caught.value)

    lenient = read_stream(
        spark, kafka_settings, subscribe=topic, startingOffsets="earliest", failOnDataLoss="false"
    )
    seen = run_available_now(lenient, checkpoint)
    assert seen.records() == after


def wait_until_gone(admin: AdminClient, topic: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while topic in admin.list_topics(timeout=5).topics:
        assert time.monotonic() < deadline, f"topic {topic} still listed {timeout}s after deletion"
        time.sleep(0.1)
