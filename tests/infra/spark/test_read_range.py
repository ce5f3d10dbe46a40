"""The executor-side read of one offset range, on the real broker without Spark."""

from __future__ import annotations

import pickle
import time

import pytest

from cadenza.infra.spark.kafka_source import (
    KafkaInputPartition,
    KafkaReadError,
    KafkaStreamReader,
    arrow_source_schema,
    read_range,
    read_range_batches,
)
from cadenza.infra.spark.options import parse_source_options
from cadenza.settings import KafkaSettings
from cadenza.testing.pytest_plugin import NewTopic
from tests.infra.spark.kafka_helpers import produce

pytestmark = pytest.mark.kafka


def test_a_range_inside_a_multi_record_batch_is_cut_exactly(
    kafka_settings: KafkaSettings, new_topic: NewTopic
) -> None:
    """The broker returns whole batches; the read must still start and stop at the asked offsets."""
    topic = new_topic()
    produce(kafka_settings, topic, [(0, None, f"v{i}".encode(), []) for i in range(30)], batched=True)
    options = parse_source_options(
        {"bootstrap.servers": kafka_settings.bootstrap_servers, "subscribe": topic}
    )
    rows = list(read_range(options, KafkaInputPartition(topic, 0, 7, 19)))
    assert [row[4] for row in rows] == list(range(7, 19))
    assert [row[1] for row in rows] == [f"v{i}".encode() for i in range(7, 19)]


def test_a_range_that_never_arrives_fails_with_the_partition_and_offsets(
    kafka_settings: KafkaSettings, new_topic: NewTopic
) -> None:
    topic = new_topic()
    produce(kafka_settings, topic, [(0, None, b"only", [])], batched=False)
    options = parse_source_options(
        {
            "bootstrap.servers": kafka_settings.bootstrap_servers,
            "subscribe": topic,
            "kafkaConsumer.pollTimeoutMs": "1500",
        }
    )
    started = time.monotonic()
    rows: list[tuple[object, ...]] = []
    with pytest.raises(KafkaReadError) as caught:
        rows.extend(read_range(options, KafkaInputPartition(topic, 0, 0, 5)))
    assert time.monotonic() - started < 10
    assert len(rows) == 1
    assert f"no record of {topic}[0] arrived for 1.5s while reading offsets [0, 5), stuck at 1" in str(
        caught.value
    )
    assert "kafkaConsumer.pollTimeoutMs" in str(caught.value)


def test_the_reader_pickles_without_its_driver_side_client(
    kafka_settings: KafkaSettings, new_topic: NewTopic
) -> None:
    """Spark ships the reader to its Python workers; a live librdkafka handle cannot travel."""
    topic = new_topic(partitions=2)
    options = parse_source_options(
        {
            "bootstrap.servers": kafka_settings.bootstrap_servers,
            "subscribe": topic,
            "kafka.socket.keepalive.enable": "true",
        }
    )
    reader = KafkaStreamReader(options)
    try:
        assert reader.initialOffset() == {topic: {"0": 0, "1": 0}}
        copy = pickle.loads(pickle.dumps(reader))
        assert copy.options == reader.options
        assert copy.options.settings.overrides == {"socket.keepalive.enable": "true"}
        assert copy.partitions({topic: {"0": 0, "1": 0}}, {topic: {"0": 0, "1": 0}}) == []
    finally:
        reader.stop()


@pytest.mark.parametrize("include_headers", [True, False])
def test_arrow_batches_hold_exactly_the_rows_of_the_range(
    kafka_settings: KafkaSettings, new_topic: NewTopic, include_headers: bool
) -> None:
    """What Spark receives as Arrow columns is, row for row, what the tuple path yields."""
    topic = new_topic()
    records = [
        (0, None if i % 3 == 0 else f"k{i}".encode(), f"v{i}".encode(), [("h", f"x{i}".encode())] * (i % 2))
        for i in range(40)
    ]
    produce(kafka_settings, topic, records, batched=True)
    options = parse_source_options(
        {
            "bootstrap.servers": kafka_settings.bootstrap_servers,
            "subscribe": topic,
            "includeHeaders": str(include_headers).lower(),
        }
    )
    part = KafkaInputPartition(topic, 0, 5, 33)
    batches = list(read_range_batches(options, part))
    assert batches
    assert all(batch.schema.equals(arrow_source_schema(include_headers)) for batch in batches)
    from_arrow = [tuple(row.values()) for batch in batches for row in batch.to_pylist()]
    expected = list(read_range(options, part))
    if include_headers:
        from_arrow = [(*row[:-1], [(h["key"], h["value"]) for h in row[-1]]) for row in from_arrow]
    assert [row[4] for row in from_arrow] == list(range(5, 33))
    assert from_arrow == expected
