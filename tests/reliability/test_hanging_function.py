"""Issue 15, finding 4 (the SIGTERM part): a map that hangs kept its worker from honouring SIGTERM (not
within 60 s). Now a signal is honoured within ``--stop-timeout``: the worker says why at ERROR level,
leaves its group and exits 3, and the hanging record stays uncommitted for the group's next owner."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition

from cadenza.infra.kafka.clients import make_consumer
from cadenza.settings import KafkaSettings
from cadenza.testing.pytest_plugin import NewTopic
from tests.reliability._support import WorkerProcess, group, quick
from tests.worker.kafka_io import produce, reading

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(120)]

HANG_AT = 5
STOP_TIMEOUT = 2.0

MODULE = """
import time
from cadenza import Pipeline

def slow(value):
    if value["n"] == {hang}:
        time.sleep(3600)  # a user function that never returns
    return value

p = Pipeline("hang-{suffix}", tenant="t", latency_target="1s")
p.source({source!r}).map(slow).sink({sink!r})
"""


def test_sigterm_is_honoured_within_the_stop_timeout_while_a_function_hangs(
    kafka_settings: KafkaSettings, new_topic: NewTopic, tmp_path: Path
) -> None:
    settings = quick(kafka_settings)
    source, sink = new_topic(partitions=1), new_topic(partitions=1)
    module = tmp_path / "hanging.py"
    module.write_text(MODULE.format(hang=HANG_AT, suffix=tmp_path.name[-6:], source=source, sink=sink))
    name = group()
    worker = WorkerProcess(
        module, settings, name, tmp_path / "worker.log", "--stop-timeout", str(STOP_TIMEOUT)
    )
    try:
        worker.wait_running()
        with reading(settings, [sink]) as reader:
            offsets = produce(settings, source, [(None, json.dumps({"n": n}).encode(), 0) for n in range(10)])
            reader.wait_for(
                lambda got: len(got[sink]) >= HANG_AT, timeout=45, what="the records before the hang"
            )
            reader.settle(1.0)
        assert sorted(json.loads(r.value or b"")["n"] for r in reader.records[sink]) == list(range(HANG_AT))
        worker.alive()
        sent = time.monotonic()
        worker.process.send_signal(signal.SIGTERM)
        code = worker.process.wait(timeout=STOP_TIMEOUT + 15)
        took = time.monotonic() - sent
    finally:
        worker.kill()
    log = worker.text()
    assert code == 3, log[-2000:]
    assert took < STOP_TIMEOUT + 10, took
    assert "did not stop within 2.0 s of the signal" in log
    consumer, _ = make_consumer(settings, name)
    try:
        committed = consumer.committed([TopicPartition(source, 0)], timeout=10)[0].offset
    finally:
        consumer.close()
    assert committed <= offsets[HANG_AT], (committed, offsets)  # the hanging record runs again
