"""A background ("detached") embedded broker managed through a pid file.

``cadenza broker --detach`` starts a broker that outlives the command, for the demo and for users who
want a broker in one terminal and workers in another; ``cadenza broker status`` and ``stop`` find it
again through a small JSON record in the state directory (``$CADENZA_HOME``, default ``~/.cadenza``).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from cadenza.infra.broker.embedded import BrokerError, EmbeddedBroker, pid_alive, terminate_pid
from cadenza.infra.kafka.clients import wait_for_broker
from cadenza.infra.kafka.errors import BrokerUnavailableError
from cadenza.settings import KafkaSettings

STATE_DIR_ENV = "CADENZA_HOME"
RECORD_NAME = "broker.json"


def default_state_dir() -> Path:
    return Path(os.environ.get(STATE_DIR_ENV) or Path.home() / ".cadenza")


@dataclass(frozen=True)
class BrokerRecord:
    pid: int
    bootstrap_servers: str
    log_path: str
    started_at: float

    def is_running(self) -> bool:
        """True if the pid is alive and still the broker (a recycled pid is not mistaken for it)."""
        if not pid_alive(self.pid):
            return False
        try:
            cmdline = Path(f"/proc/{self.pid}/cmdline").read_bytes()
        except OSError:
            return True  # no /proc (macOS): trust the pid
        return b"broker" in cmdline and self.bootstrap_servers.encode() in cmdline


@dataclass(frozen=True)
class BrokerStatus:
    record: BrokerRecord | None
    running: bool
    answering: bool


def read_record(state_dir: Path) -> BrokerRecord | None:
    path = state_dir / RECORD_NAME
    try:
        data = json.loads(path.read_text())
        return BrokerRecord(**data)
    except FileNotFoundError:
        return None
    except (ValueError, TypeError) as exc:
        raise BrokerError(f"{path} is not a broker record ({exc}); delete it and retry") from exc


def start_background(state_dir: Path, *, port: int | None = None, timeout: float = 30.0) -> BrokerRecord:
    """Start a detached broker unless one from this state directory is already running."""
    existing = read_record(state_dir)
    if existing is not None and existing.is_running():
        raise BrokerError(
            f"a background broker is already running at {existing.bootstrap_servers} "
            f"(pid {existing.pid}); stop it with `cadenza broker stop`"
        )
    state_dir.mkdir(parents=True, exist_ok=True)
    log_path = state_dir / "broker.log"
    broker = EmbeddedBroker(port=port, log_path=log_path)
    bootstrap = broker.start(timeout=timeout, detach=True)
    assert broker.process is not None
    record = BrokerRecord(
        pid=broker.process.pid, bootstrap_servers=bootstrap, log_path=str(log_path), started_at=time.time()
    )
    tmp = state_dir / f".{RECORD_NAME}.tmp"
    tmp.write_text(json.dumps(asdict(record)))
    tmp.replace(state_dir / RECORD_NAME)
    return record


def background_status(state_dir: Path, timeout: float = 3.0) -> BrokerStatus:
    record = read_record(state_dir)
    if record is None or not record.is_running():
        return BrokerStatus(record=record, running=False, answering=False)
    try:
        wait_for_broker(KafkaSettings(bootstrap_servers=record.bootstrap_servers), timeout=timeout)
        answering = True
    except BrokerUnavailableError:
        answering = False
    return BrokerStatus(record=record, running=True, answering=answering)


def stop_background(state_dir: Path) -> BrokerRecord | None:
    """Stop the background broker; returns its record if one was running, None otherwise."""
    record = read_record(state_dir)
    if record is None:
        return None
    was_running = record.is_running() and terminate_pid(record.pid)
    (state_dir / RECORD_NAME).unlink(missing_ok=True)
    return record if was_running else None
