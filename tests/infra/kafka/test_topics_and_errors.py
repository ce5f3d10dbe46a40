"""Topic creation and client errors against the real broker (and a port where none listens)."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka.admin import ConfigResource, ResourceType

from cadenza.infra.broker.embedded import free_port
from cadenza.infra.kafka.clients import (
    DeliveryReport,
    flush_or_raise,
    make_admin,
    make_producer,
    wait_for_broker,
)
from cadenza.infra.kafka.errors import BrokerUnavailableError, DeliveryError, TopicError
from cadenza.infra.kafka.topics import TopicSpec, ensure_topics
from cadenza.settings import KafkaSettings


@pytest.mark.kafka
def test_ensure_topics_is_idempotent_and_applies_configs(kafka_settings: KafkaSettings) -> None:
    admin = make_admin(kafka_settings)
    name = f"t-ensure-{uuid.uuid4().hex[:8]}"
    spec = TopicSpec(name, partitions=3, configs={"cleanup.policy": "compact"})
    assert ensure_topics(admin, [spec]) == [name]
    assert ensure_topics(admin, [spec]) == []  # already there: success, nothing created
    metadata = admin.list_topics(name, timeout=10)
    assert len(metadata.topics[name].partitions) == 3
    resource = ConfigResource(ResourceType.TOPIC, name)
    configs = admin.describe_configs([resource])[resource].result(timeout=10)
    assert configs["cleanup.policy"].value == "compact"


@pytest.mark.kafka
def test_an_existing_topic_with_too_few_partitions_is_an_error(kafka_settings: KafkaSettings) -> None:
    admin = make_admin(kafka_settings)
    name = f"t-shape-{uuid.uuid4().hex[:8]}"
    ensure_topics(admin, [TopicSpec(name, partitions=2)])
    with pytest.raises(TopicError, match=r"exists with 2 partition\(s\) but 4 are required"):
        ensure_topics(admin, [TopicSpec(name, partitions=4)])


def test_topic_spec_rejects_impossible_shapes() -> None:
    with pytest.raises(TopicError, match="partitions must be >= 1"):
        TopicSpec("x", partitions=0)
    with pytest.raises(TopicError, match=r"1\.\.249 characters"):
        TopicSpec("")


def test_wait_for_broker_names_the_address_and_the_fix() -> None:
    settings = KafkaSettings.load(bootstrap_servers=f"127.0.0.1:{free_port()}")
    with pytest.raises(BrokerUnavailableError) as excinfo:
        wait_for_broker(settings, timeout=1.5)
    message = str(excinfo.value)
    assert settings.bootstrap_servers in message
    assert "cadenza broker" in message and "CADENZA_BOOTSTRAP_SERVERS" in message


def test_producing_to_an_unreachable_cluster_fails_instead_of_retrying_forever() -> None:
    settings = KafkaSettings.load(bootstrap_servers=f"127.0.0.1:{free_port()}", delivery_timeout_ms=1500)
    producer, errors = make_producer(settings)
    report = DeliveryReport()
    producer.produce("nowhere", value=b"x", on_delivery=report)
    with pytest.raises(DeliveryError, match="not delivered"):
        flush_or_raise(producer, report, timeout=10)
    assert report.failed == 1 and report.delivered == 0
    assert errors.last is not None  # librdkafka reported the unreachable broker through error_cb
