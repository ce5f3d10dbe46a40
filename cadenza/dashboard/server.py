"""The dashboard's HTTP side: the page, its JSON and its vendored assets, from the standard library.

``ThreadingHTTPServer`` is enough for a page a few operators keep open, and adds no web framework to
the worker image. A background thread polls the workers every ``interval_s``; requests only read
the :class:`~cadenza.dashboard.live.Dashboard`'s state, so a slow worker never blocks the page.
Assets are read from the package (``cadenza/dashboard/static``), so the page works offline.
"""

from __future__ import annotations

import json
import logging
import math
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import parse_qs

from cadenza.dashboard.live import Dashboard
from cadenza.dashboard.page import render_page

__all__ = ["DashboardServer", "serve_dashboard"]

_log = logging.getLogger("cadenza.dashboard")

_TYPES = {".js": "text/javascript", ".css": "text/css", ".md": "text/plain", ".LICENSE": "text/plain"}


def _asset(name: str) -> bytes | None:
    """A file of the package's ``static`` folder; ``None`` for anything else (no path traversal)."""
    if "/" in name or "\\" in name or name.startswith("."):
        return None
    entry = resources.files("cadenza.dashboard").joinpath("static", name)
    return entry.read_bytes() if entry.is_file() else None


def _since(query: str) -> float | None:
    """``since=<epoch seconds>`` from the query string; anything unparsable means the whole history."""
    values = parse_qs(query).get("since", [])
    try:
        since = float(values[0]) if values else None
    except ValueError:
        return None
    return since if since is not None and math.isfinite(since) else None


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        path, _, query = self.path.partition("?")
        if path in ("/", "/index.html"):
            self._send(HTTPStatus.OK, "text/html; charset=utf-8", render_page(self.server.dashboard.view()))
        elif path == "/api/state":
            body = json.dumps(self.server.dashboard.view(since=_since(query)), allow_nan=False)
            self._send(HTTPStatus.OK, "application/json", body.encode())
        elif path.startswith("/static/") and (data := _asset(path.removeprefix("/static/"))) is not None:
            suffix = next((s for s in _TYPES if path.endswith(s)), "")
            self._send(HTTPStatus.OK, _TYPES.get(suffix, "application/octet-stream"), data)
        elif path == "/favicon.ico":
            self._send(HTTPStatus.NO_CONTENT, "text/plain", b"")
        else:
            self._send(HTTPStatus.NOT_FOUND, "text/plain", b"not found\n")

    def _send(self, status: HTTPStatus, content_type: str, body: str | bytes) -> None:
        data = body.encode() if isinstance(body, str) else body
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        _log.debug("%s " + format, self.address_string(), *args)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], dashboard: Dashboard) -> None:
        self.dashboard = dashboard
        super().__init__(address, _Handler)


class DashboardServer:
    """A running dashboard: the HTTP server and the polling thread; :meth:`close` stops both."""

    def __init__(self, dashboard: Dashboard, host: str, port: int, interval_s: float) -> None:
        self.dashboard = dashboard
        self.interval_s = interval_s
        self._http = _Server((host, port), dashboard)
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._http.serve_forever, name="dashboard-http", daemon=True),
            threading.Thread(target=self._poll, name="dashboard-poll", daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    @property
    def url(self) -> str:
        host, port = self._http.server_address[:2]
        shown = host if isinstance(host, str) else host.decode()
        return f"http://{'127.0.0.1' if shown in ('0.0.0.0', '') else shown}:{port}/"

    def _poll(self) -> None:
        while not self._stop.is_set():
            try:
                self.dashboard.poll()
            except Exception:  # a bug in one poll must not stop the page from updating later
                _log.exception("polling the workers failed")
            self._stop.wait(self.interval_s)

    def close(self) -> None:
        self._stop.set()
        self._http.shutdown()
        self._http.server_close()
        for thread in self._threads:
            thread.join(10)
        self.dashboard.close()

    def __enter__(self) -> DashboardServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve_dashboard(
    dashboard: Dashboard, host: str = "127.0.0.1", port: int = 8088, interval_s: float = 1.0
) -> DashboardServer:
    """Start serving ``dashboard`` on ``host:port`` (0: a free port), polling every ``interval_s``."""
    if not 0 < interval_s <= 2.0:
        raise ValueError(
            f"the page promises a refresh within 2 s; interval_s={interval_s!r} is not in (0, 2]"
        )
    return DashboardServer(dashboard, host, port, interval_s)
