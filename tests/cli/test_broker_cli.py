"""``cadenza broker`` as a user runs it: a real process, real signals, a real pid file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from cadenza.infra.broker.embedded import free_port, port_in_use

CLI = [sys.executable, "-m", "cadenza"]


def run(*args: str, state_dir: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CADENZA_HOME": str(state_dir), "COLUMNS": "200"}
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=60, env=env, check=False)


def test_foreground_broker_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "CADENZA_HOME": str(tmp_path), "COLUMNS": "200"}
    process = subprocess.Popen(
        [*CLI, "broker", "--port", str(port), "--log-file", str(tmp_path / "fg.log")],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    assert process.stdout is not None
    first_line = process.stdout.readline()
    assert f"broker ready at 127.0.0.1:{port}" in first_line
    assert port_in_use("127.0.0.1", port)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=20) == 0
    assert "stopping the broker" in process.stdout.read()
    deadline = time.monotonic() + 5
    while port_in_use("127.0.0.1", port) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not port_in_use("127.0.0.1", port)


def test_detached_broker_status_and_stop(tmp_path: Path) -> None:
    started = run("broker", "--detach", state_dir=tmp_path)
    assert started.returncode == 0, started.stdout + started.stderr
    assert "broker running in the background at 127.0.0.1:" in started.stdout
    try:
        status = run("broker", "status", state_dir=tmp_path)
        assert status.returncode == 0 and "answering" in status.stdout
        again = run("broker", "--detach", state_dir=tmp_path)
        assert again.returncode == 1 and "already running" in again.stderr
    finally:
        stopped = run("broker", "stop", state_dir=tmp_path)
    assert stopped.returncode == 0 and "stopped the background broker" in stopped.stdout
    after = run("broker", "status", state_dir=tmp_path)
    assert after.returncode == 1 and "no background broker is running" in after.stdout
    assert not (tmp_path / "broker.json").exists()


def test_bad_settings_give_one_clear_error_and_no_traceback(tmp_path: Path) -> None:
    env = {**os.environ, "CADENZA_HOME": str(tmp_path), "CADENZA_BOOTSTRAP_SERVERS": "nohostport"}
    result = subprocess.run(
        [*CLI, "demo", "--records", "10"], capture_output=True, text=True, timeout=60, env=env, check=False
    )
    assert result.returncode == 1
    assert "CADENZA_BOOTSTRAP_SERVERS" in result.stderr and "is not host:port" in result.stderr
    assert "Traceback" not in result.stderr
