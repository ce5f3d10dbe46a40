"""The test-broker choice, decided from the environment without starting anything."""

from __future__ import annotations

import pytest

from cadenza.testing import brokers


def test_an_external_cluster_comes_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CADENZA_TEST_BOOTSTRAP", "kafka.internal:9093")
    monkeypatch.setattr(brokers, "docker_available", lambda: True)
    assert brokers.planned_broker_kind() == ("external", "CADENZA_TEST_BOOTSTRAP=kafka.internal:9093")


def test_testcontainers_when_docker_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CADENZA_TEST_BOOTSTRAP", raising=False)
    monkeypatch.setattr(brokers, "docker_available", lambda: True)
    assert brokers.planned_broker_kind()[0] == "testcontainers"


def test_the_embedded_broker_otherwise(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CADENZA_TEST_BOOTSTRAP", raising=False)
    monkeypatch.setattr(brokers, "docker_available", lambda: False)
    assert brokers.planned_broker_kind() == ("embedded", "no CADENZA_TEST_BOOTSTRAP and no Docker daemon")


def test_docker_is_not_available_on_a_machine_without_a_daemon(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    assert brokers.docker_available() is False
