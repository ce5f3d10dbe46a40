"""Through a real broker: a user function that blocks the worker's loop for longer than the idle
timeout times no window input out, so the records that waited in Kafka meanwhile are not late.

Upstream partition 1 delivers a record before the block and one during it; partition 0's record
after the blocking one moves past the window. Counted on physical time, partition 1 would be idle
by then: the window would close without partition 1's second record, which would go to ``.late``.
"""

from __future__ import annotations

import json
import threading
import time
import uuid

import pytest
from pydantic import BaseModel

from cadenza.pipelines import Pipeline, Tumbling
from cadenza.settings import KafkaSettings
from cadenza.testing.pytest_plugin import NewTopic
from cadenza.worker import Worker
from tests.worker.kafka_io import produce, reading, running

pytestmark = pytest.mark.kafka

IDLE_TIMEOUT = 3.0
BLOCK = 3 * IDLE_TIMEOUT


class Event(BaseModel):
    key: str
    ts: float
    slow: bool = False


def record(key: str, ts: float, partition: int, *, slow: bool = False) -> tuple[None, bytes, int]:
    return None, json.dumps({"key": key, "ts": ts, "slow": slow}).encode(), partition


def test_a_user_function_blocking_the_loop_times_no_window_input_out(
    kafka_settings: KafkaSettings, new_topic: NewTopic
) -> None:
    source, out = new_topic(partitions=2), new_topic()
    blocking = threading.Event()

    def call_out(event: Event) -> Event:
        if event.slow:  # a remote call that hangs far beyond the idle timeout
            blocking.set()
            time.sleep(BLOCK)
        return event

    name = f"blocked-{uuid.uuid4().hex[:6]}"
    p = Pipeline(name, tenant="t", latency_target="1s")
    keyed = p.source(source, value=Event, timestamp="ts").map(call_out).key_by(lambda e: e.key)
    keyed.window(Tumbling(10.0)).count().sink(out)
    worker = Worker([p], kafka_settings, group=f"g-{name}", watermark_idle_timeout=IDLE_TIMEOUT)
    with running(worker), reading(kafka_settings, [out]) as reader:
        windows = {s.task.subtopology.input_kind: s for s in worker._schedules}["repartition"]
        produce(kafka_settings, source, [record("a", 1.0, 0), record("b", 2.0, 1)])
        deadline = time.monotonic() + 60
        while windows.metrics.consumed < 2:  # the window has heard from both upstream partitions
            assert time.monotonic() < deadline, "the first two records never reached the window"
            time.sleep(0.05)
        produce(kafka_settings, source, [record("a", 3.0, 0, slow=True), record("a", 25.0, 0)])
        assert blocking.wait(30)
        produce(kafka_settings, source, [record("b", 5.0, 1)])  # waits in Kafka while the loop blocks
        produce(kafka_settings, source, [record("b", 26.0, 1)])
        reader.wait_for(lambda r: len(r[out]) >= 2, 60, "the [0, 10) windows of both keys")
        reader.settle(1.0)
        counts = {
            (json.loads(r.value or b"")["key"], json.loads(r.value or b"")["window_start"]): json.loads(
                r.value or b""
            )["value"]
            for r in reader.records[out]
        }
    assert worker.counters.late == 0
    assert counts == {("a", 0.0): 2, ("b", 0.0): 2}
