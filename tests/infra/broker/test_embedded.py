"""The embedded broker: start, answer, stop, and clear errors when it cannot."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest

from cadenza.infra.broker.embedded import BROKER_BIN_ENV, BrokerError, EmbeddedBroker, find_broker_binary
from cadenza.infra.kafka.clients import wait_for_broker
from cadenza.settings import KafkaSettings


def test_starts_answers_metadata_and_stops(tmp_path: Path) -> None:
    log_path = tmp_path / "broker.log"
    with EmbeddedBroker(log_path=log_path) as broker:
        assert broker.process is not None
        pid = broker.process.pid
        metadata = wait_for_broker(KafkaSettings.load(bootstrap_servers=broker.bootstrap_servers), timeout=5)
        assert len(metadata.brokers) == 1
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert log_path.exists()


def test_a_port_in_use_is_refused_with_advice() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        with pytest.raises(BrokerError, match=f"port {port} on 127.0.0.1 is already in use.*--port"):
            EmbeddedBroker(port=port).start()


def test_a_missing_binary_says_what_to_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(BROKER_BIN_ENV, "/no/such/tansu")
    with pytest.raises(BrokerError, match="CADENZA_BROKER_BIN=/no/such/tansu is not an executable file"):
        find_broker_binary()


def test_a_binary_that_dies_at_start_is_reported_with_its_log(tmp_path: Path) -> None:
    fake = tmp_path / "tansu"
    fake.write_text("#!/bin/sh\necho 'cannot bind: permission denied' >&2\nexit 3\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    broker = EmbeddedBroker(binary=fake, log_path=tmp_path / "broker.log")
    with pytest.raises(BrokerError, match=r"(?s)exited with code 3.*cannot bind: permission denied"):
        broker.start(timeout=10)
