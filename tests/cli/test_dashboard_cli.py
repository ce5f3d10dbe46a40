"""``cadenza dashboard`` as a user runs it: prints its address, serves the page, stops on SIGTERM."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from cadenza.cli.demo import _dashboard


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_the_command_serves_the_page_and_shows_a_silent_worker_as_down() -> None:
    dead = free_port()
    env = {**os.environ, "COLUMNS": "200"}
    command = [sys.executable, "-m", "cadenza", "dashboard", "--port", "0", "--worker", f"127.0.0.1:{dead}"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        match = re.search(r"http://127\.0\.0\.1:\d+/", line)
        assert match, f"no address in {line!r}"
        url = match.group(0)
        deadline = time.monotonic() + 20
        while True:
            with urllib.request.urlopen(url + "api/state", timeout=5) as response:
                state = json.load(response)
            if state["workers"][0]["status"] == "down" or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert state["workers"][0]["status"] == "down"
        assert "no answer" in state["workers"][0]["error"]
        with urllib.request.urlopen(url, timeout=5) as response:
            page = response.read().decode()
        assert f"127.0.0.1:{dead}" in page and "uPlot.iife.min.js" in page
        with urllib.request.urlopen(url + "static/uPlot.iife.min.js", timeout=5) as response:
            assert b"uPlot" in response.read()
        process.send_signal(signal.SIGTERM)  # how a container or a supervisor stops it
        assert process.wait(15) == 0
        assert "stopping the dashboard" in process.stdout.read()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)


def test_without_a_worker_it_says_what_is_missing() -> None:
    command = [sys.executable, "-m", "cadenza", "dashboard"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode != 0
    assert "--worker" in result.stdout + result.stderr


def test_the_demo_prints_its_dashboard_address_and_takes_a_free_port_when_8088_is_busy(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = int(busy.getsockname()[1])
        with _dashboard(f"127.0.0.1:{free_port()}", taken):
            printed = capsys.readouterr().out
            match = re.search(r"http://127\.0\.0\.1:(\d+)/", printed)
            assert match, printed
            assert int(match.group(1)) != taken
            with urllib.request.urlopen(match.group(0) + "api/state", timeout=5) as response:
                assert json.load(response)["workers"][0]["url"].startswith("127.0.0.1:")
