"""The worker's HTTP endpoint: ``/metrics`` for Prometheus, ``/healthz`` and ``/readyz`` for orchestrators.

One small server for all three because they answer the same question from different angles (is this
worker doing its job?) and a container should expose one port for it. ``/metrics`` is
prometheus_client's own WSGI app (content negotiation, OpenMetrics, gzip, ``name[]`` filters);
the wrapper only adds the two probes:

- ``/healthz`` (liveness): 200 while the process should keep running, 503 once the worker declares
  itself broken, so an orchestrator restarts it;
- ``/readyz`` (readiness): 503 until the worker says it is ready (its first assignment callback ran,
  even with nothing assigned, and restored that state), while no broker is reachable, and once it
  shuts down, so rollouts wait for it.

The server binds 127.0.0.1 unless told otherwise: metrics name tenants and pipelines, which is not for
every network the host is on. Requests are served on threads of their own; nothing here runs on the
worker's executor thread.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server
from wsgiref.types import StartResponse, WSGIEnvironment

from prometheus_client import CollectorRegistry, make_wsgi_app

__all__ = ["HealthState", "MetricsServer", "serve_metrics"]

_TEXT = ("Content-Type", "text/plain; charset=utf-8")


def _text_headers() -> list[tuple[str, str]]:
    """A fresh list per response: wsgiref adds ``Content-Length`` to the very list it is handed, so a
    shared one would carry one response's length into the next (a 404's 45 bytes on a 3-byte probe)."""
    return [_TEXT]


class HealthState:
    """Liveness and readiness flags the worker flips; read by the HTTP threads.

    Plain attributes: a bool assignment is atomic, and a probe that reads a value one request late
    is harmless.
    """

    __slots__ = ("live", "ready")

    def __init__(self, *, live: bool = True, ready: bool = False) -> None:
        self.live = live
        self.ready = ready

    def __repr__(self) -> str:
        return f"HealthState(live={self.live}, ready={self.ready})"


def _probe(ok: bool, start_response: StartResponse) -> list[bytes]:
    start_response("200 OK" if ok else "503 Service Unavailable", _text_headers())
    return [b"ok\n" if ok else b"unavailable\n"]


def make_app(registry: CollectorRegistry, health: HealthState) -> Any:
    """The WSGI app serving ``/metrics``, ``/healthz`` and ``/readyz`` (404 elsewhere)."""
    metrics = make_wsgi_app(registry)

    def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "") or "/"
        if path == "/metrics":
            return metrics(environ, start_response)  # type: ignore[no-any-return]
        if path == "/healthz":
            return _probe(health.live, start_response)
        if path == "/readyz":
            return _probe(health.live and health.ready, start_response)
        start_response("404 Not Found", _text_headers())
        return [b"not found; try /metrics, /healthz or /readyz\n"]

    return app


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True


class _QuietHandler(WSGIRequestHandler):
    """No access log on stderr: Prometheus scrapes every few seconds, forever."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


class MetricsServer:
    """A running endpoint; :meth:`close` stops it. ``port`` is the bound port (useful with port 0)."""

    def __init__(self, server: WSGIServer, thread: threading.Thread) -> None:
        self._server = server
        self._thread = thread

    @property
    def host(self) -> str:
        return str(self._server.server_address[0])

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        host = self.host
        return f"http://[{host}]:{self.port}" if ":" in host else f"http://{host}:{self.port}"

    def close(self, timeout: float = 5.0) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout)

    def __repr__(self) -> str:
        return f"MetricsServer({self.url})"


def serve_metrics(
    registry: CollectorRegistry, health: HealthState, *, port: int = 0, host: str = "127.0.0.1"
) -> MetricsServer:
    """Serve ``registry`` and the probes on ``host:port`` from a background thread (port 0: any free)."""
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]

    class Server(_ThreadingServer):
        address_family = family

    server = make_server(
        host, port, make_app(registry, health), server_class=Server, handler_class=_QuietHandler
    )
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.1}, name="cadenza-metrics-http", daemon=True
    )
    thread.start()
    return MetricsServer(server, thread)
