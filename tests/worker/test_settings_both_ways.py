"""Every setting takes effect the same way from Python and from ``cadenza worker``.

Each field of :class:`WorkerConfig` and :class:`ProcessConfig` is set to a value other than its
default, once as the command's options, once as its ``CADENZA_*`` variables and once in Python, and
the worker's settings in effect (what ``cadenza worker --check`` prints, read from the built worker)
must be that value all three ways. A field added to either model without a value here fails the
first test, so no setting can be declared and then ignored by one of the ways. The defaults must
agree too (they once did not: the activities topic).

What reaches the worker this way is used from there; the process settings, which once took effect
only through the command, are also checked for their effect from Python: the metrics endpoint
serves and announces (here), and restarts (tests/reliability/test_broker_outage.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from cadenza import Pipeline
from cadenza.settings import KafkaSettings
from cadenza.worker import ProcessConfig, Worker, WorkerConfig
from cadenza.worker.config import ENV_PREFIX

PIPELINES = """
from cadenza import Pipeline

pipeline = Pipeline("both-ways", tenant="t", latency_target="1s")
pipeline.source("both-ways-in").map(lambda value: value).sink("both-ways-out")
"""

#: A value other than the default for every field of both models.
NON_DEFAULT: dict[str, Any] = {
    "group": "both-ways-group",
    "policy": "edf",
    "partitions": 3,
    "batch_size": 7,
    "max_buffered": 1234,
    "quantum_records": 5,
    "quantum_ms": 3.5,
    "run_slice": 0.02,
    "poll_timeout": 0.3,
    "cores": 3,
    "max_thread_lessees": 5,
    "warm_lessees": 2,
    "lessee_idle_release": 4.5,
    "commit_interval": 0.4,
    "restore_timeout": 45.0,
    "restore_slice": 0.05,
    "watermark_idle_timeout": 12.0,
    "progress_interval_ms": 75.0,
    "state_store": "rocksdb",
    "state_dir": "/tmp/cadenza-both-ways-state",
    "hop_quantile": 0.9,
    "spans_topic": "both-ways-spans",
    "span_sample_ratio": 0.5,
    "feedback_topic": "both-ways-feedback",
    "activities_topic": "off",
    "max_poll_interval": 120.0,
    "hang_timeout": 60.0,
    "crash_dir": "/tmp/cadenza-both-ways-crash",
    "consumer_overrides": {"fetch.max.bytes": 1048576},
    "lanes": "off",
    "fetch_wait_ms": 40,
    "replace_plan": True,
    "ownership": "plan",
    "worker_id": "both-ways-worker",
    "gc_young_threshold": 5000,
    "stall_threshold_ms": 250.0,
    "metrics_port": 9876,
    "metrics_host": "0.0.0.0",
    "metrics_advertised_host": "worker-7.example",
    "discovery_topic": "both-ways-workers",
    "max_restarts": 2,
    "stop_timeout": 7.5,
}


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return json.dumps(value)
    return str(value)


def _option_args(values: dict[str, Any]) -> list[str]:
    args: list[str] = []
    for name, value in values.items():
        option = f"--{name.replace('_', '-')}"
        if isinstance(value, bool):
            args.append(option if value else f"--no-{name.replace('_', '-')}")
        else:
            args.extend([option, _text(value)])
    return args


def _check(module: Path, args: list[str], env: dict[str, str]) -> dict[str, Any]:
    """What ``cadenza worker --check`` prints: the settings the built worker uses."""
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(ENV_PREFIX) or k == "CADENZA_BOOTSTRAP_SERVERS"
    }
    done = subprocess.run(
        [sys.executable, "-m", "cadenza", "worker", "--check", str(module), *args],
        capture_output=True,
        text=True,
        env={**clean, **env},
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


def _in_python(config: WorkerConfig, process: ProcessConfig) -> dict[str, Any]:
    pipeline = Pipeline("both-ways", tenant="t", latency_target="1s")
    pipeline.source("both-ways-in").map(lambda value: value).sink("both-ways-out")
    return Worker([pipeline], KafkaSettings.load(), config, process=process).settings_in_effect()


@pytest.fixture
def module(tmp_path: Path) -> Path:
    path = tmp_path / "both_ways_pipelines.py"
    path.write_text(PIPELINES)
    return path


def test_every_field_of_both_models_has_a_non_default_value_here() -> None:
    fields = {**WorkerConfig.model_fields, **ProcessConfig.model_fields}
    assert set(NON_DEFAULT) == set(fields)
    for name, field in fields.items():
        assert NON_DEFAULT[name] != field.default, name


def test_every_setting_takes_effect_the_same_way_from_options_variables_and_python(module: Path) -> None:
    worker_values = {k: v for k, v in NON_DEFAULT.items() if k in WorkerConfig.model_fields}
    process_values = {k: v for k, v in NON_DEFAULT.items() if k in ProcessConfig.model_fields}
    by_options = _check(module, _option_args(NON_DEFAULT), {})
    by_variables = _check(module, [], {f"{ENV_PREFIX}{k.upper()}": _text(v) for k, v in NON_DEFAULT.items()})
    by_python = _in_python(WorkerConfig(**worker_values), ProcessConfig(**process_values))
    assert by_options == by_variables == by_python
    for name, value in NON_DEFAULT.items():
        assert by_python[name] == value, name


def test_the_defaults_are_the_same_from_the_command_and_from_python(module: Path) -> None:
    by_command = _check(module, [], {})
    by_python = _in_python(WorkerConfig(), ProcessConfig())
    for derived in ("worker_id",):  # host-pid: another process
        by_command.pop(derived)
        by_python.pop(derived)
    assert by_command == by_python
    assert by_python["activities_topic"] == "cadenza-activities"


@pytest.mark.kafka
def test_a_worker_started_in_python_serves_and_announces_its_metrics(kafka_settings: KafkaSettings) -> None:
    # Once only `cadenza worker` served metrics: Worker(config=WorkerConfig(metrics_port=...)) did not.
    pipeline = Pipeline(f"metrics-{os.getpid()}", tenant="t", latency_target="1s")
    pipeline.source(f"metrics-in-{os.getpid()}").sink(f"metrics-out-{os.getpid()}")
    said: list[str] = []
    worker = Worker(
        [pipeline],
        kafka_settings,
        WorkerConfig(group=f"metrics-{os.getpid()}", activities_topic="off"),
        process=ProcessConfig(metrics_port=0, discovery_topic=f"metrics-workers-{os.getpid()}"),
    )
    thread = threading.Thread(target=lambda: worker.run(say=said.append), daemon=True)
    thread.start()
    try:
        assert worker.wait_assigned(60)
        url = next(line.split()[-1] for line in said if line.startswith("metrics on "))
        with urllib.request.urlopen(url, timeout=10) as answer:
            assert b"cadenza_buffered_records" in answer.read()
        assert any(line.startswith("announcing ") for line in said), said
    finally:
        worker.stop()
        thread.join(60)
    assert not thread.is_alive()
