"""``cadenza pool`` as a process: it runs its workers, exports its gauges, and SIGTERM stops them all."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from cadenza.infra.broker.embedded import free_port
from cadenza.settings import KafkaSettings
from cadenza.testing.pytest_plugin import NewTopic

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(120)]

MODULE = """
from pydantic import BaseModel
from cadenza.pipelines import Pipeline

class Item(BaseModel):
    id: int

pipeline = Pipeline("{name}", tenant="t", latency_target="5s")
pipeline.source("{source}", value=Item).map(lambda x: x.id).sink("{sink}")
"""


def _gauge(url: str, name: str) -> float | None:
    try:
        with urllib.request.urlopen(url, timeout=1.0) as response:
            text = response.read().decode()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def _children(pid: int) -> list[int]:
    listing = subprocess.run(
        ["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True, check=False
    )
    return [int(word) for word in listing.stdout.split()]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_pool_runs_min_workers_and_stops_them_on_sigterm(
    kafka_settings: KafkaSettings, new_topic: NewTopic, tmp_path: Path
) -> None:
    source, sink = new_topic(partitions=2), new_topic(partitions=2)
    module = tmp_path / "tiny_pipeline.py"
    module.write_text(MODULE.format(name=f"cli-{uuid.uuid4().hex[:6]}", source=source, sink=sink))
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    env = {**os.environ, "CADENZA_BOOTSTRAP_SERVERS": kafka_settings.bootstrap_servers}
    command = [sys.executable, "-m", "cadenza", "pool", str(module), "--group", f"g-{uuid.uuid4().hex[:8]}"]
    pool = subprocess.Popen(
        [*command, "--min", "2", "--max", "3", "--interval", "1", "--metrics-port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while _gauge(url, "cadenza_pool_workers") != 2.0:
            assert pool.poll() is None, pool.stderr.read().decode() if pool.stderr else ""
            assert time.monotonic() < deadline, "the pool never ran its two workers"
            time.sleep(0.3)
        assert _gauge(url, "cadenza_pool_desired_workers") == 2.0
        workers = _children(pool.pid)
        assert len(workers) == 2
        pool.send_signal(signal.SIGTERM)
        assert pool.wait(60) == 0
        assert not any(_alive(pid) for pid in workers)
    finally:
        if pool.poll() is None:
            pool.kill()
            pool.wait()
