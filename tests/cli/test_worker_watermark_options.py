"""The watermark settings of ``cadenza worker`` reach the worker: ``--watermark-idle-timeout`` (and
``CADENZA_PROGRESS_INTERVAL_MS``) change when a window behind a silent input partition closes."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest

from cadenza.settings import KafkaSettings
from cadenza.testing.pytest_plugin import NewTopic
from tests.reliability._support import WorkerProcess, quick
from tests.worker.kafka_io import produce, reading

pytestmark = pytest.mark.kafka

MODULE = """
from pydantic import BaseModel

from cadenza import Pipeline, Tumbling


class Event(BaseModel):
    key: str
    ts: float


p = Pipeline("{name}", tenant="t", latency_target="1s")
(
    p.source("{source}", value=Event, timestamp="ts")
    .key_by(lambda e: e.key)
    .window(Tumbling("10s"))
    .count()
    .sink("{out}")
)
"""


def test_idle_timeout_option_lets_a_window_close_behind_a_silent_partition(
    kafka_settings: KafkaSettings, new_topic: NewTopic, tmp_path: Path
) -> None:
    source, out = new_topic(partitions=2), new_topic()
    name = f"idle-cli-{uuid.uuid4().hex[:6]}"
    module = tmp_path / "idle_cli_mod.py"
    module.write_text(MODULE.format(name=name, source=source, out=out))
    settings = quick(kafka_settings)
    worker = WorkerProcess(
        module,
        settings,
        f"g-{name}",
        tmp_path / "worker.log",
        "--watermark-idle-timeout",
        "1",
        env={"CADENZA_PROGRESS_INTERVAL_MS": "20", "CADENZA_LOG_LEVEL": "WARNING"},
    )
    try:
        worker.wait_running(60)
        with reading(kafka_settings, [out]) as reader:
            # Only source partition 1 ever delivers. With the default 30 s timeout, partition 0 would
            # hold the watermark (and the [0, 10) window) back far longer than this test waits.
            deadline = time.monotonic() + 40
            for t in (1.0, 5.0, 12.0, 25.0, 38.0):
                produce(kafka_settings, source, [(None, json.dumps({"key": "u", "ts": t}).encode(), 1)])
                time.sleep(1.5)
            reader.wait_for(lambda r: len(r[out]) >= 1, max(1.0, deadline - time.monotonic()), "a window")
            first = json.loads(reader.records[out][0].value or b"")
        worker.alive()
    finally:
        worker.terminate()
    assert (first["window_start"], first["value"]) == (0.0, 2)
    assert "delivered nothing for 1.0s (idle timeout)" in worker.text()
