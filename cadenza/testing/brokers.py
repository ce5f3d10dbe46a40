"""Choosing and starting the broker a test run talks to.

The order, first that applies: ``CADENZA_TEST_BOOTSTRAP`` (an external cluster, e.g. a staging one
with SASL settings in ``CADENZA_*``), then a testcontainers Kafka container when a Docker daemon
answers, then the embedded broker. Every choice is a real broker over the wire: tests never mock
Kafka.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from cadenza.infra.broker.embedded import EmbeddedBroker
from cadenza.infra.kafka.clients import wait_for_broker
from cadenza.settings import KafkaSettings

EXTERNAL_ENV = "CADENZA_TEST_BOOTSTRAP"
BrokerKind = Literal["external", "testcontainers", "embedded"]

_log = logging.getLogger("cadenza.testing")


@dataclass(frozen=True)
class TestBroker:
    """The broker of a test run; ``settings`` carries bootstrap plus any CADENZA_* security settings."""

    __test__ = False  # not a test class, despite the name

    kind: BrokerKind
    settings: KafkaSettings
    detail: str

    @property
    def bootstrap_servers(self) -> str:
        return self.settings.bootstrap_servers


def docker_available() -> bool:
    """True if a Docker daemon answers a ping within a second or two."""
    try:
        import docker  # noqa: PLC0415 - optional dependency, only needed with Docker

        client = docker.from_env(timeout=2)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:  # no docker package, no socket, daemon down: all mean "not available"
        return False


def planned_broker_kind() -> tuple[BrokerKind, str]:
    """Which broker the run will use and why, decided without starting anything."""
    external = os.environ.get(EXTERNAL_ENV)
    if external:
        return "external", f"{EXTERNAL_ENV}={external}"
    if docker_available():
        return "testcontainers", "a Docker daemon answers"
    return "embedded", "no CADENZA_TEST_BOOTSTRAP and no Docker daemon"


@contextlib.contextmanager
def provide_test_broker(log_dir: Path | None = None) -> Iterator[TestBroker]:
    """Yield a running broker for the whole test session and stop it afterwards (if we started it)."""
    kind, reason = planned_broker_kind()
    if kind == "external":
        settings = KafkaSettings.load(bootstrap_servers=os.environ[EXTERNAL_ENV])
        wait_for_broker(settings, timeout=30)
        yield TestBroker("external", settings, reason)
        return
    if kind == "testcontainers":
        from testcontainers.kafka import KafkaContainer  # noqa: PLC0415 - optional dependency

        image = os.environ.get("CADENZA_TEST_KAFKA_IMAGE", "confluentinc/cp-kafka:7.6.1")
        with KafkaContainer(image) as container:
            settings = KafkaSettings.load(bootstrap_servers=container.get_bootstrap_server())
            wait_for_broker(settings, timeout=60)
            yield TestBroker("testcontainers", settings, f"{reason}; image {image}")
        return
    directory = log_dir or Path(tempfile.mkdtemp(prefix="cadenza-test-broker-"))
    log_path = directory / "broker.log"
    with EmbeddedBroker(log_path=log_path) as broker:
        settings = KafkaSettings.load(bootstrap_servers=broker.bootstrap_servers)
        yield TestBroker("embedded", settings, f"{reason}; Tansu log {log_path}")
