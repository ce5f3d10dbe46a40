"""What a worker does as a process rather than as an engine: its metrics endpoint, its announcement
on the discovery topic, and a stop asked by a signal that must not wait for ever.

All of it is set by :class:`~cadenza.worker.config.ProcessConfig`, and both ``cadenza worker`` and
:meth:`cadenza.worker.Worker.run` / :meth:`~cadenza.worker.Worker.serve` read it through here, so a
setting takes effect the same way from the command and from Python.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from types import FrameType

from cadenza.errors import ConfigError
from cadenza.infra.metrics.prometheus import PrometheusExporter
from cadenza.infra.metrics.server import MetricsServer
from cadenza.settings import KafkaSettings
from cadenza.worker.announcer import WorkerAnnouncer, advertised_url
from cadenza.worker.config import ProcessConfig

__all__ = ["MetricsEndpoint", "stop_on_signals"]

_log = logging.getLogger("cadenza.worker")


class MetricsEndpoint:
    """Serves a worker's ``/metrics``, ``/healthz`` and ``/readyz`` on ``metrics_port`` (if set) and
    announces the URL on the discovery topic (unless off). A restarted worker exports from a fresh
    registry: :meth:`serve` binds the endpoint to it again, and the announcement follows."""

    def __init__(
        self,
        process: ProcessConfig,
        settings: KafkaSettings,
        *,
        say: Callable[[str], None] | None = None,
    ) -> None:
        self.process = process
        self.settings = settings
        self._say = say or (lambda text: _log.info("%s", text))
        self.server: MetricsServer | None = None
        self.announcer: WorkerAnnouncer | None = None

    def serve(
        self, exporter: PrometheusExporter, worker_id: str, group: str, pipelines: Sequence[str]
    ) -> None:
        process = self.process
        if process.metrics_port is None:
            return
        if self.server is not None:
            self.server.close()
        try:
            self.server = server = exporter.start_http(process.metrics_port, host=process.metrics_host)
        except OSError as exc:  # the port is taken, or the host is not this machine's
            raise ConfigError(
                f"--metrics-port {process.metrics_port} (CADENZA_METRICS_PORT) on {process.metrics_host}: "
                f"{exc.strerror or exc}; choose a free port, or stop what listens there"
            ) from None
        self._say(f"metrics on {server.url}/metrics")
        url = advertised_url(process.metrics_advertised_host or server.host, server.port)
        if self.announcer is not None:
            self.announcer.url = url  # a restarted worker may have bound another port (--metrics-port 0)
        elif process.announces:
            try:
                self.announcer = WorkerAnnouncer(
                    self.settings,
                    worker_id=worker_id,
                    url=url,
                    group=group,
                    pipelines=list(pipelines),
                    topic=process.discovery_topic,
                ).start()
            except Exception as exc:  # discovery is a convenience: the worker runs without it
                self._say(f"not announcing on {process.discovery_topic}: {exc}")
            else:
                self._say(f"announcing {url} on {process.discovery_topic}")

    @property
    def url(self) -> str | None:
        return self.server.url if self.server is not None else None

    def close(self) -> None:
        if self.announcer is not None:
            self.announcer.close()  # the tombstone: dashboards drop this worker now, not after a timeout
            self.announcer = None
        if self.server is not None:
            self.server.close()
            self.server = None


@contextmanager
def stop_on_signals(
    stop: Callable[[], None], abandon: Callable[[], None], stop_timeout: float
) -> Iterator[None]:
    """SIGINT and SIGTERM call ``stop``; should the step in flight not end within ``stop_timeout``
    seconds (a user function that hangs: a signal handler cannot interrupt it), ``abandon`` leaves
    the group from a timer thread, committing nothing, and the process exits 3."""
    watchdog: list[threading.Timer] = []

    def give_up() -> None:
        _log.error(
            "the worker did not stop within %.1f s of the signal (a step still running: a user function "
            "that hangs?); leaving the group without committing the records in flight, exiting 3",
            stop_timeout,
        )
        try:
            abandon()
        finally:
            logging.shutdown()
            os._exit(3)

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        stop()
        if not watchdog:
            timer = threading.Timer(stop_timeout, give_up)
            timer.daemon = True
            watchdog.append(timer)
            timer.start()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for timer in watchdog:
            timer.cancel()
