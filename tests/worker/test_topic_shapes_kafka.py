"""Issue 15, finding 7: a changelog topic whose partitions do not match its input's is refused before the
group join, with the cause and the fix (it used to pass the start-up check and then stop the worker with
a raw ``_UNKNOWN_PARTITION`` once partitions were assigned)."""

from __future__ import annotations

import uuid

import pytest

from cadenza import Pipeline, Tumbling
from cadenza.infra.kafka.clients import make_admin
from cadenza.infra.kafka.errors import TopicError
from cadenza.infra.kafka.topics import TopicSpec, delete_topics, ensure_topics
from cadenza.settings import KafkaSettings
from cadenza.testing.pytest_plugin import NewTopic
from cadenza.worker import Worker
from cadenza.worker.config import WorkerConfig
from tests.reliability._support import group

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(60)]


@pytest.mark.parametrize(("source_partitions", "changelog_partitions"), [(6, 4), (2, 3)])
def test_a_changelog_of_another_partition_count_than_its_input_is_refused_before_the_join(
    kafka_settings: KafkaSettings, new_topic: NewTopic, source_partitions: int, changelog_partitions: int
) -> None:
    source, sink = new_topic(partitions=source_partitions), new_topic(partitions=1)
    pipeline = Pipeline(f"shape-{uuid.uuid4().hex[:6]}", tenant="t", latency_target="1s")
    pipeline.source(source, timestamp="ts").key_by(lambda v: v["k"]).window(Tumbling("1s")).count().sink(sink)
    window = next(node for node in pipeline.compile().nodes if node.kind == "window_aggregate")
    changelog = window.changelog_topic
    assert changelog is not None
    admin = make_admin(kafka_settings)
    ensure_topics(admin, [TopicSpec(changelog, partitions=changelog_partitions)])
    worker = Worker([pipeline], kafka_settings, WorkerConfig(group=group()))
    try:
        with pytest.raises(TopicError) as refused:
            worker.start()
        message = str(refused.value)
        assert f"changelog topic {changelog!r} has {changelog_partitions} partitions" in message
        assert f"has {source_partitions}; partition p of a changelog" in message  # its repartition input
        assert f"Recreate the changelog with {source_partitions} partitions" in message
        assert not worker.joined
    finally:
        worker.close()
        delete_topics(admin, [changelog])
