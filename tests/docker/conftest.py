"""The ``containers`` marker and the Docker daemon check shared by the container tests.

The marker is registered here rather than in the suite-wide conftest: only this directory uses it.
"""

from __future__ import annotations

import pytest

from cadenza.testing.brokers import docker_available


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "containers: builds cadenza's images and runs them; skipped when no Docker daemon answers"
    )


@pytest.fixture(scope="session")
def docker_daemon() -> None:
    """Skip (with the reason in the CI summary) when no Docker daemon answers."""
    if not docker_available():
        pytest.skip("no Docker daemon answers (docker ping failed): container images cannot be built here")
