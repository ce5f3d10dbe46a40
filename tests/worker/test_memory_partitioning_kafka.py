"""The in-memory transport partitions keyed records exactly as the worker's Kafka producer does."""

from __future__ import annotations

from cadenza.settings import KafkaSettings
from cadenza.state import encode_key
from cadenza.testing.pytest_plugin import NewTopic
from cadenza.worker.engine.memory import partition_for
from cadenza.worker.engine.output import Output
from tests.worker.kafka_io import reading


def test_partition_for_matches_the_producer_partitioner(
    kafka_settings: KafkaSettings, new_topic: NewTopic
) -> None:
    topic = new_topic(partitions=5)
    # The keys a key_by writes: the state key encoding of what the user's function returned.
    keys = [encode_key(k) for k in [*(f"user-{i}" for i in range(40)), *range(20), ("a", 1)]]
    output = Output(kafka_settings)
    for key in keys:
        output.produce(topic, b"v", key)  # partition -1: the producer's choice, as in KeyByOp
    output.flush()
    output.close()
    with reading(kafka_settings, [topic]) as reader:
        reader.wait_for(lambda r: len(r[topic]) >= len(keys), 30.0, "every keyed record")
        placed = {record.key: record.partition for record in reader.records[topic]}
    assert placed == {key: partition_for(key, 5) for key in keys}
    assert len(set(placed.values())) == 5
