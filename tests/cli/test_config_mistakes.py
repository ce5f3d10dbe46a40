"""Issue 15, item 8: every configuration and CLI mistake of a user gives one clear line naming the setting
and the fix, and no traceback."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

MODULE = """
from cadenza import Pipeline

p = Pipeline("mistakes", tenant="t", latency_target="1s")
p.source("mistakes-in").map(lambda v: v).sink("mistakes-out")
"""


def worker(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "mistakes_mod.py").write_text(MODULE)
    environment = {key: value for key, value in os.environ.items() if not key.startswith("CADENZA_")} | {
        "CADENZA_BOOTSTRAP_SERVERS": "127.0.0.1:1",
        **env,
    }
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), str(tmp_path)]))
    return subprocess.run(
        [sys.executable, "-m", "cadenza", "worker", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=environment,
        cwd=tmp_path,
        check=False,
    )


def one_clear_line(result: subprocess.CompletedProcess[str], *names: str) -> str:
    out = result.stdout + result.stderr
    assert "Traceback" not in out, out
    errors = [line for line in out.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, out
    text = " ".join(out.split())  # the console wraps long lines
    for name in names:
        assert name in text, out
    return text


def test_a_registry_url_without_scheme_is_one_line_even_with_brackets_in_it(tmp_path: Path) -> None:
    result = worker(tmp_path, "mistakes_mod", CADENZA_SCHEMA_REGISTRY_URL="127.0.0.1:8081")
    assert result.returncode == 1
    text = one_clear_line(result, "CADENZA_SCHEMA_REGISTRY_URL", "http(s)://host[:port][/path]")
    assert "MarkupError" not in text


def test_an_unknown_log_level_is_one_line_naming_the_setting(tmp_path: Path) -> None:
    result = worker(tmp_path, "mistakes_mod", CADENZA_LOG_LEVEL="LOUD")
    assert result.returncode == 1
    one_clear_line(result, "CADENZA_LOG_LEVEL", "'LOUD'", "WARNING")


def test_an_unknown_log_format_warns_once_and_does_not_stop_the_command(tmp_path: Path) -> None:
    # A missing module, so that the command stops right after the log format was dealt with.
    result = worker(tmp_path, "no_such_module_here", CADENZA_LOG_FORMAT="xml")
    assert result.returncode == 1, result.stderr  # the module's error, not a usage error (2)
    text = one_clear_line(result, "no_such_module_here")
    assert "CADENZA_LOG_FORMAT=xml is not a log format" in text


def test_credentials_in_the_bootstrap_address_are_refused_without_being_echoed(tmp_path: Path) -> None:
    result = worker(tmp_path, "mistakes_mod", CADENZA_BOOTSTRAP_SERVERS="alice:s3cr3t-pw@broker:9092")
    assert result.returncode == 1
    text = one_clear_line(result, "CADENZA_BOOTSTRAP_SERVERS", "CADENZA_SASL_PASSWORD")
    assert "s3cr3t-pw" not in text and "alice" not in text


def test_a_metrics_port_in_use_is_one_line_naming_the_port(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = worker(tmp_path, "mistakes_mod", "--metrics-port", str(port))
    assert result.returncode == 1
    one_clear_line(result, f"--metrics-port {port}", "choose a free port")


@pytest.mark.timeout(60)
def test_no_broker_at_the_address_names_the_address_and_the_fix(tmp_path: Path) -> None:
    result = worker(tmp_path, "mistakes_mod", CADENZA_REQUEST_TIMEOUT_MS="2000")
    assert result.returncode == 1
    one_clear_line(result, "127.0.0.1:1", "CADENZA_BOOTSTRAP_SERVERS", "cadenza broker --detach")


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("no_such_store_module:make", "module 'no_such_store_module' not found"),
        ("mistakes_mod:missing", "module 'mistakes_mod' has no attribute 'missing'"),
        ("mistakes_mod:p", "is a Pipeline, not callable"),
        ("disk", "unknown state store 'disk'"),
    ],
)
def test_a_bad_state_store_spec_is_one_line(tmp_path: Path, spec: str, expected: str) -> None:
    result = worker(tmp_path, "mistakes_mod", "--state-store", spec)
    assert result.returncode == 1
    one_clear_line(result, f"state store {spec!r}" if ":" in spec else "state store", expected)
