"""Through a real broker: a user function that blocks the worker's loop for longer than the idle
timeout times no window input out, so the records that waited in Kafka meanwhile are not late.

Upstream partition 1 delivers a record before the block and one during it; partition 0's record
after the blocking one moves past the window. Counted on physical time, partition 1 would be idle
by then: the window would close without partition 1's second record, which would go to ``.late``.

Also: records waiting in the buffer behind the worker's fetch rounds time no input out (silence is
timed on fetch stamps); the idle clock stands still while the buffer is full; and a key_by sends
heartbeats for input partitions whose records wait in the worker.
"""

from __future__ import annotations

import json
import threading
import time
import uuid

import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, Message
from pydantic import BaseModel

from cadenza.pipelines import Pipeline, Tumbling
from cadenza.settings import KafkaSettings
from cadenza.state import encode_key
from cadenza.testing.pytest_plugin import NewTopic
from cadenza.worker import Worker
from cadenza.worker.config import WorkerConfig
from cadenza.worker.engine.idle_clock import IdleClock
from cadenza.worker.engine.operators.routing import HEARTBEAT_FLOOR
from cadenza.worker.engine.wire import (
    ORIGIN_HEADER,
    PROGRESS_HEADER,
    encode_record_value,
    pack_origin,
    unpack_progress,
)
from tests.worker.kafka_io import Reader, fetched, produce, reading, running

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
    worker = Worker([p], kafka_settings, WorkerConfig(group=f"g-{name}", watermark_idle_timeout=IDLE_TIMEOUT))
    with running(worker), reading(kafka_settings, [out]) as reader:
        windows = {s.task.subtopology.input_kind: s for s in worker.engine.schedules}["repartition"]
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


def _counting_worker(settings: KafkaSettings, source: str, out: str, prefix: str) -> Worker:
    """A started worker counting records per key in 10 s windows after a key_by, idle timeout 1 s."""
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    p = Pipeline(name, tenant="t", latency_target="1s")
    p.source(source, value=Event, timestamp="ts").key_by(lambda e: e.key).window(Tumbling(10.0)).count().sink(
        out
    )
    worker = Worker([p], settings, WorkerConfig(group=f"g-{name}", watermark_idle_timeout=1.0))
    worker.start()
    return worker


def repartitioned(topic: str, offset: int, *, upstream: int, origin: int, key: str, ts: float) -> Message:
    """A record of the window's repartition topic (partition 0) as its consumer returns it, written
    by the key_by of source partition ``upstream``."""
    return Message(
        topic=topic,
        partition=0,
        offset=offset,
        key=encode_key(key),
        value=encode_record_value(Event(key=key, ts=ts)),
        headers=[(ORIGIN_HEADER, pack_origin(upstream, origin, 0, ts))],
        timestamp=(TIMESTAMP_CREATE_TIME, int(time.time() * 1000)),
    )


@pytest.mark.parametrize("stamped", [True, False], ids=["fetch-stamps", "run-times"])
def test_records_queued_behind_other_work_time_no_window_input_out(
    kafka_settings: KafkaSettings, new_topic: NewTopic, stamped: bool
) -> None:
    """A started worker is handed its window's records as its fetches would hand them: input 1's
    second record is fetched 0.1 s after input 0's record that moves past the window, and both then
    wait in the buffer for three idle timeouts while the worker goes on fetching (under load, behind
    more urgent work). Timed on the fetch stamps (the worker's way), input 1 was not silent and
    nothing is late; the control times the same run on when records ran, and input 1's record goes
    to ``.late``."""
    source = new_topic(partitions=2)
    worker = _counting_worker(kafka_settings, source, new_topic(), "queued")
    if not stamped:
        worker.engine.executor.read_clock = IdleClock()  # the stamps are read by nobody: silence is run time
    topic = {s.task.subtopology.input_kind: s for s in worker.engine.schedules}[
        "repartition"
    ].task.subtopology.input_topic
    clock = worker.idle_clock
    try:
        worker.admit(
            [
                repartitioned(topic, 0, upstream=0, origin=0, key="a", ts=1.0),
                repartitioned(topic, 1, upstream=1, origin=0, key="b", ts=2.0),
            ]
        )
        assert worker.run_for(5.0) == 2
        worker.admit([repartitioned(topic, 2, upstream=0, origin=1, key="a", ts=25.0)])
        time.sleep(0.1)
        worker.admit([repartitioned(topic, 3, upstream=1, origin=1, key="b", ts=5.0)])
        queued = time.monotonic() + 3.0
        while time.monotonic() < queued:  # the worker's rounds: fetches, the window's records wait
            clock.fetch_started()
            time.sleep(0.05)
            clock.fetch_ended()
            time.sleep(0.01)
        clock.fetch_started()
        clock.fetch_ended()
        assert worker.run_for(5.0) == 2
    finally:
        worker.close()
    assert worker.counters.late == (0 if stamped else 1)


def test_while_the_buffer_is_full_and_every_partition_paused_the_idle_clock_stands_still(
    kafka_settings: KafkaSettings, new_topic: NewTopic
) -> None:
    """The worker reads nothing while its flow control keeps every partition paused, so that time is
    no input's silence; it counts again once the buffer drained and the partitions resumed."""
    source, out = new_topic(partitions=2), new_topic()
    name = f"full-{uuid.uuid4().hex[:6]}"
    p = Pipeline(name, tenant="t", latency_target="1s")
    p.source(source, value=Event, timestamp="ts").map(lambda e: e).sink(out)
    worker = Worker([p], kafka_settings, WorkerConfig(group=f"g-{name}", max_buffered=4))
    worker.start()
    clock = worker.idle_clock
    now_ms = int(time.time() * 1000)
    try:
        worker.admit(
            [fetched(source, 0, offset, record("a", 1.0 + offset, 0)[1], now_ms) for offset in range(6)]
        )
        fetcher = worker.membership.fetcher

        def full() -> bool:
            return fetcher.flow.full

        worker.membership.flow_control()
        assert full()
        stood = clock.now()
        time.sleep(0.3)
        assert clock.now() == stood
        assert worker.run_for(5.0) == 6
        worker.membership.flow_control()
        assert not full()
        time.sleep(0.3)
        assert clock.now() >= stood + 0.25
    finally:
        worker.close()


def _progress(reader: Reader, topic: str) -> list[tuple[int, int, float]]:
    found = []
    for r in reader.records[topic]:
        packed = r.headers.get(PROGRESS_HEADER)
        if packed is not None:
            found.append((r.partition, *unpack_progress(packed)))
    return sorted(found)


def test_a_partition_whose_records_wait_in_the_worker_beats_and_one_with_none_does_not(
    kafka_settings: KafkaSettings, new_topic: NewTopic
) -> None:
    """A key_by's heartbeats through the broker: on every partition of the repartition topic for the
    input partition whose record waits in the buffer, none for the one with nothing waiting."""
    source = new_topic(partitions=2)
    worker = _counting_worker(kafka_settings, source, new_topic(), "beats")
    try:
        deadline = time.monotonic() + 60
        while not {(source, 0), (source, 1)} <= worker.assignment:
            assert time.monotonic() < deadline, "the worker got no partitions"
            worker.step()
        keyed = worker.engine.progress.keyed[0]
        output = worker._output
        assert output is not None
        waiting = fetched(source, 1, 0, json.dumps({"key": "b", "ts": 5.0}).encode(), int(time.time() * 1000))
        worker.admit([waiting])  # fetched, not run: it waits in the buffer
        worker.engine.progress.send(time.monotonic() + 60)  # past the heartbeat interval
        output.producer.flush(10)
        with reading(kafka_settings, [keyed.topic]) as reader:
            reader.wait_for(
                lambda r: len(_progress(reader, keyed.topic)) >= keyed.partitions, 30, "heartbeats"
            )
            reader.settle(0.5)
            assert _progress(reader, keyed.topic) == [
                (q, 1, HEARTBEAT_FLOOR) for q in range(keyed.partitions)
            ]
            assert worker.run_for(5.0) == 1  # it ran: progress grew, nothing waits any more
            worker.engine.progress.send(time.monotonic() + 120)
            output.producer.flush(10)
            reader.wait_for(
                lambda r: len(_progress(reader, keyed.topic)) >= 2 * keyed.partitions, 30, "progress"
            )
            reader.settle(0.5)
            assert _progress(reader, keyed.topic) == sorted(
                [(q, 1, HEARTBEAT_FLOOR) for q in range(keyed.partitions)]
                + [(q, 1, 5.0) for q in range(keyed.partitions)]
            )
    finally:
        worker.close()
