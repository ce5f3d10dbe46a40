"""pytest fixtures giving each test run one real broker and each test its own topics.

``kafka_broker`` (session): the :class:`TestBroker`; ``kafka_settings`` (session): its settings;
``new_topic`` (per test): a factory creating a uniquely named topic, so tests never see each other's
records even on a shared external cluster. The broker is started only if a test asks for it.
"""

from __future__ import annotations

import contextlib
import re
import uuid
from collections.abc import Callable, Iterator

import pytest

from cadenza.infra.kafka.clients import make_admin
from cadenza.infra.kafka.topics import TopicSpec, delete_topics, ensure_topics
from cadenza.settings import KafkaSettings
from cadenza.testing.brokers import TestBroker, planned_broker_kind, provide_test_broker

NewTopic = Callable[..., str]


def pytest_report_header(config: pytest.Config) -> str:
    kind, reason = planned_broker_kind()
    return f"cadenza test broker: {kind} ({reason})"


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestBroker]:
    with provide_test_broker(tmp_path_factory.mktemp("broker")) as broker:
        yield broker


@pytest.fixture(scope="session")
def kafka_settings(kafka_broker: TestBroker) -> KafkaSettings:
    return kafka_broker.settings


@pytest.fixture
def new_topic(kafka_settings: KafkaSettings, request: pytest.FixtureRequest) -> Iterator[NewTopic]:
    """Create topics named after the test plus a random suffix; delete them when the test ends."""
    admin = make_admin(kafka_settings)
    created: list[str] = []
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", request.node.name)[:80]

    def factory(partitions: int = 1, configs: dict[str, str] | None = None, suffix: str = "") -> str:
        name = f"t-{stem}{('-' + suffix) if suffix else ''}-{uuid.uuid4().hex[:8]}"
        ensure_topics(admin, [TopicSpec(name, partitions=partitions, configs=configs or {})])
        created.append(name)
        return name

    yield factory
    # Clean-up is best effort: a broker that refuses deletes must not fail the test.
    with contextlib.suppress(Exception):
        delete_topics(admin, created)
