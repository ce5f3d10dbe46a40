"""``cadenza health`` (the image's HEALTHCHECK) against the real metrics/health server a worker runs."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry

from cadenza.infra.broker.embedded import free_port
from cadenza.infra.metrics.server import HealthState, MetricsServer, serve_metrics


@pytest.fixture
def server() -> Iterator[tuple[MetricsServer, HealthState]]:
    health = HealthState(live=True, ready=False)
    running = serve_metrics(CollectorRegistry(), health, port=0)
    try:
        yield running, health
    finally:
        running.close()


def health(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cadenza", "health", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
        check=False,
    )


def test_live_worker_is_healthy_and_not_ready_until_it_says_so(
    server: tuple[MetricsServer, HealthState],
) -> None:
    running, state = server
    live = health("--port", str(running.port))
    assert live.returncode == 0, live.stderr
    assert "/healthz: 200" in live.stdout
    not_ready = health("--port", str(running.port), "--ready")
    assert not_ready.returncode == 1
    assert not_ready.stderr.strip().count("\n") == 0, "one line"
    assert "/readyz: 503" in not_ready.stderr
    state.ready = True
    assert health("--port", str(running.port), "--ready", "--quiet").returncode == 0


def test_port_comes_from_the_environment_like_in_the_image(server: tuple[MetricsServer, HealthState]) -> None:
    running, state = server
    assert health("--quiet", env={"CADENZA_METRICS_PORT": str(running.port)}).returncode == 0
    state.live = False
    broken = health(env={"CADENZA_METRICS_PORT": str(running.port)})
    assert broken.returncode == 1
    assert "unhealthy:" in broken.stderr and "503" in broken.stderr


def test_nothing_listening_is_one_line_and_exit_1() -> None:
    result = health("--port", str(free_port()), "--timeout", "2")
    assert result.returncode == 1
    assert result.stderr.startswith("unhealthy:") and "connection refused" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_missing_port_is_a_usage_error_not_a_crash() -> None:
    env = {k: v for k, v in os.environ.items() if k != "CADENZA_METRICS_PORT"}
    result = subprocess.run(
        [sys.executable, "-m", "cadenza", "health"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert result.returncode == 2
    assert "--port" in result.stderr and "Traceback" not in result.stderr
