"""Progress records through a real broker: what a repartition partition learns from upstream
partitions that send it no data, and the idle timeout's metric and log line.

Keys are picked so that all of source partition 0's records land in repartition partition 0 and all
of source partition 1's in repartition partition 1. With no idle timeout, a window at repartition
partition 0 can close only once it knows that upstream partition 1 got past it, and nothing but a
progress record can tell it that.
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid

import pytest
from pydantic import BaseModel

from cadenza.infra.kafka.clients import DeliveryReport, flush_or_raise, make_producer
from cadenza.pipelines import Pipeline, Tumbling
from cadenza.settings import KafkaSettings
from cadenza.state import encode_key
from cadenza.testing.pytest_plugin import NewTopic
from cadenza.worker import Worker
from cadenza.worker.config import WorkerConfig
from cadenza.worker.engine.wire import PROGRESS_HEADER, unpack_progress
from tests.worker.kafka_io import Outgoing, Reader, fetched, produce, reading, running

pytestmark = pytest.mark.kafka

SIZE = 10.0


class Event(BaseModel):
    key: str
    ts: float


def key_of(event: Event) -> str:
    return event.key


def keys_by_partition(settings: KafkaSettings, topic: str) -> dict[int, str]:
    """One key per partition of a two-partition topic, as the worker's producer partitions them."""
    producer, errors = make_producer(settings)
    report = DeliveryReport()
    landed: dict[str, int] = {}
    for n in range(40):
        key = f"user{n}"

        def delivered(error: object, message: object, key: str = key) -> None:
            report(error, message)  # type: ignore[arg-type]
            landed[key] = message.partition()  # type: ignore[attr-defined]

        producer.produce(topic, b"x", encode_key(key), on_delivery=delivered)
    flush_or_raise(producer, report, timeout=30)
    errors.raise_fatal()
    chosen: dict[int, str] = {}
    for key, partition in landed.items():
        chosen.setdefault(partition, key)
    assert set(chosen) == {0, 1}, landed
    return chosen


def keys_landing(settings: KafkaSettings, topic: str) -> dict[int, list[str]]:
    """The keys ``user0``..``user39`` by the partition of a two-partition topic they land in."""
    producer, errors = make_producer(settings)
    report = DeliveryReport()
    landed: dict[int, list[str]] = {0: [], 1: []}
    for n in range(40):
        key = f"user{n}"

        def delivered(error: object, message: object, key: str = key) -> None:
            report(error, message)  # type: ignore[arg-type]
            landed[message.partition()].append(key)  # type: ignore[attr-defined]

        producer.produce(topic, b"x", encode_key(key), on_delivery=delivered)
    flush_or_raise(producer, report, timeout=30)
    errors.raise_fatal()
    assert len(landed[0]) >= 2 and landed[1], landed
    return landed


def everyone(event: Event) -> str:
    return "all"


def events(key: str, times: list[float], partition: int) -> list[Outgoing]:
    return [(None, json.dumps({"key": key, "ts": t}).encode(), partition) for t in times]


def pipeline(source: str, out: str, name: str) -> Pipeline:
    p = Pipeline(name, tenant="t", latency_target="1s")
    p.source(source, value=Event, timestamp="ts").key_by(key_of).window(Tumbling(SIZE)).count().sink(out)
    return p


def test_a_partition_without_data_from_an_upstream_partition_closes_windows_through_its_progress(
    kafka_settings: KafkaSettings, new_topic: NewTopic
) -> None:
    source, out, scratch = new_topic(partitions=2), new_topic(), new_topic(partitions=2)
    keys = keys_by_partition(kafka_settings, scratch)
    name = f"progress-{uuid.uuid4().hex[:6]}"
    p = pipeline(source, out, name)
    repartition = next(n.repartition_topic for n in p.compile().nodes if n.repartition_topic)
    assert repartition is not None
    # Partition 0's key: windows [0, 10) and [10, 20); partition 1's: [0, 10) to [20, 30).
    produce(kafka_settings, source, events(keys[0], [1, 2, 3, 12, 15], 0))
    produce(kafka_settings, source, events(keys[1], [4, 14, 26], 1))
    worker = Worker([p], kafka_settings, WorkerConfig(group=f"g-{name}", watermark_idle_timeout=0))
    with running(worker), reading(kafka_settings, [out]) as reader:
        # Repartition partition 0's watermark: min(15, 26) = 15, closing [0, 10) of keys[0]; partition
        # 1's: min(26, 15) = 15, closing [0, 10) of keys[1]. Without partition 1's progress, partition
        # 0 would wait for ever (no idle timeout).
        reader.wait_for(lambda r: len(r[out]) >= 2, 60, "the [0, 10) windows of both keys")
        reader.settle(1.0)
        got = sorted(
            (json.loads(r.value or b"")["key"], json.loads(r.value or b"")["window_start"])
            for r in reader.records[out]
        )
        assert got == sorted([(keys[0], 0.0), (keys[1], 0.0)])
        counts = {
            json.loads(r.value or b"")["key"]: json.loads(r.value or b"")["value"]
            for r in reader.records[out]
        }
        assert counts == {keys[0]: 3, keys[1]: 1}
        # Progress goes on: partition 0 reaches 35, which moves both watermarks to 26 - [10, 20) closes.
        produce(kafka_settings, source, events(keys[0], [35], 0))
        reader.wait_for(lambda r: len(r[out]) >= 4, 60, "the [10, 20) windows of both keys")
    schedules = {s.task.subtopology.input_kind: s for s in worker.engine.schedules}
    assert schedules["repartition"].metrics.consumed == 9  # records only, not progress records
    assert worker.counters.progress_records > 0
    assert worker.counters.dead_letter_decode == 0 and worker.counters.late == 0

    topic = Reader(kafka_settings, [repartition])
    try:
        topic.settle(2.0)
        progress: dict[int, dict[int, float]] = {0: {}, 1: {}}
        data: dict[int, int] = {0: 0, 1: 0}
        for record in topic.records[repartition]:
            packed = record.headers.get(PROGRESS_HEADER)
            if packed is None:
                data[record.partition] += 1
                continue
            assert record.key is None and record.value is None
            upstream, event_time = unpack_progress(packed)
            seen = progress[record.partition]
            assert event_time > seen.get(upstream, -1.0), "progress only grows, per upstream partition"
            seen[upstream] = event_time
    finally:
        topic.close()
    assert data == {0: 6, 1: 3}  # each key's records in its own partition
    # Every repartition partition heard how far each upstream partition got, data or not.
    assert progress == {0: {0: 35.0, 1: 26.0}, 1: {0: 35.0, 1: 26.0}}


def kept(event: Event) -> bool:
    return event.key != "dropped"


def test_records_a_filter_drops_before_the_key_by_are_progress_all_the_same(
    kafka_settings: KafkaSettings, new_topic: NewTopic
) -> None:
    # Source partition 1 holds only records the filter drops: no data and, unless dropped records
    # count, no progress from it ever reaches the window, which (no idle timeout) would wait for ever.
    source, out = new_topic(partitions=2), new_topic()
    name = f"filtered-{uuid.uuid4().hex[:6]}"
    p = Pipeline(name, tenant="t", latency_target="1s")
    stream = p.source(source, value=Event, timestamp="ts").filter(kept).key_by(key_of)
    stream.window(Tumbling(SIZE)).count().sink(out)
    produce(kafka_settings, source, events("user", [1, 2, 3, 12, 15], 0))
    produce(kafka_settings, source, events("dropped", [4, 14, 26], 1))
    worker = Worker([p], kafka_settings, WorkerConfig(group=f"g-{name}", watermark_idle_timeout=0))
    with running(worker), reading(kafka_settings, [out]) as reader:
        # Watermark min(15, 26) = 15 closes [0, 10) only.
        reader.wait_for(lambda r: len(r[out]) >= 1, 60, "the [0, 10) window")
        reader.settle(1.0)
        assert [json.loads(r.value or b"")["value"] for r in reader.records[out]] == [3]
        # Partition 0 reaches 35: min(35, 26) = 26 closes [10, 20).
        produce(kafka_settings, source, events("user", [35], 0))
        reader.wait_for(lambda r: len(r[out]) >= 2, 60, "the [10, 20) window")
        reader.settle(1.0)
        got = [json.loads(r.value or b"") for r in reader.records[out]]
    assert [(r["key"], r["window_start"], r["value"]) for r in got] == [("user", 0.0, 3), ("user", 10.0, 2)]
    assert worker.counters.late == 0


def test_an_idle_input_is_counted_and_logged_once(
    kafka_settings: KafkaSettings, new_topic: NewTopic, caplog: pytest.LogCaptureFixture
) -> None:
    source, out = new_topic(partitions=2), new_topic()
    name = f"idle-{uuid.uuid4().hex[:6]}"
    p = pipeline(source, out, name)
    worker = Worker([p], kafka_settings, WorkerConfig(group=f"g-{name}", watermark_idle_timeout=1.0))
    caplog.set_level(logging.WARNING, logger="cadenza.worker")
    with running(worker), reading(kafka_settings, [out]) as reader:
        # Only source partition 1 ever delivers: after the timeout it alone moves the watermark.
        for t in (1.0, 5.0, 12.0, 25.0, 38.0):
            produce(kafka_settings, source, events("u", [t], 1))
            reader.settle(1.5)
        reader.wait_for(lambda r: len(r[out]) >= 1, 30, "a window closed despite the silent partition")
        scraped = worker.exporter.render().decode()
    counted = re.findall(
        rf'cadenza_watermark_idle_timeouts_total\{{[^}}]*pipeline="{name}"[^}}]*\}} (\S+)', scraped
    )
    assert counted and float(counted[0]) >= 1, scraped
    lines = [r.getMessage() for r in caplog.records if "idle timeout" in r.getMessage()]
    assert lines, "the idle timeout should be logged"
    assert len(lines) == len(set(lines)), f"logged more than once per partition and input: {lines}"
    assert all("watermark input 0 " in line for line in lines), lines  # upstream partition 0 went silent


def test_progress_goes_out_after_the_quantum_without_waiting_for_the_loop(
    kafka_settings: KafkaSettings, new_topic: NewTopic
) -> None:
    # Only run_for is called, never step(): the loop's own progress check does not run, so progress
    # records can only come from the after-quantum hook the started worker sets on its executor.
    source, out = new_topic(partitions=2), new_topic()
    name = f"quantum-{uuid.uuid4().hex[:6]}"
    worker = Worker(
        [pipeline(source, out, name)],
        kafka_settings,
        WorkerConfig(group=f"g-{name}", progress_interval_ms=50.0),
    )
    worker.start()
    try:
        now = int(time.time() * 1000)
        batch = [
            fetched(source, partition, offset, json.dumps({"key": "u", "ts": 1.0 + offset}).encode(), now)
            for partition in (0, 1)
            for offset in range(3)
        ]
        worker.admit(batch)
        time.sleep(0.1)  # past the progress interval
        assert worker.counters.progress_records == 0
        assert worker.run_for(10.0) == 6
        # At least the first quantum's upstream partition, to each repartition partition (the second
        # quantum's goes out too only if the interval has passed again by then).
        repartitions = worker.engine.progress.keyed[0].partitions
        assert repartitions == 2
        assert worker.counters.progress_records in (repartitions, 2 * repartitions)
    finally:
        worker.close()


def test_a_key_by_after_a_key_by_holds_the_windows_back_for_its_slowest_upstream_partition(
    kafka_settings: KafkaSettings, new_topic: NewTopic
) -> None:
    # Re-keyed by user, then all into one key: the second key_by reads the first one's repartition
    # topic, whose partition 0 gets the records of users a and c from both source partitions. Source
    # partition 0 runs far ahead before partition 1 delivers anything. The window may not close
    # [0, 10) on partition 0's records alone: partition 1's records at 5 and 6 s are on time.
    source, out, scratch = new_topic(partitions=2), new_topic(), new_topic(partitions=2)
    landed = keys_landing(kafka_settings, scratch)
    (a, c), d = landed[0][:2], landed[1][0]
    name = f"chain-{uuid.uuid4().hex[:6]}"
    p = Pipeline(name, tenant="t", latency_target="1s")
    (
        p.source(source, value=Event, timestamp="ts")
        .key_by(key_of)
        .map(lambda event: event)
        .key_by(everyone)
        .window(Tumbling(SIZE))
        .count()
        .sink(out)
    )
    repartitions = [n.repartition_topic for n in p.compile().nodes if n.repartition_topic]
    assert len(repartitions) == 2 and repartitions[1] is not None
    second = repartitions[1]
    produce(kafka_settings, source, events(a, [1, 2], 0) + events(d, [3], 0))
    produce(kafka_settings, source, events(a, [25], 0) + events(d, [26], 0))
    produce(kafka_settings, source, events(a, [40], 0) + events(d, [41], 0))
    worker = Worker([p], kafka_settings, WorkerConfig(group=f"g-{name}", watermark_idle_timeout=0))
    with running(worker), reading(kafka_settings, [out, second]) as reader:
        # Partition 0's records have passed both key_bys before partition 1 delivers anything.
        reader.wait_for(
            lambda r: sum(1 for x in r[second] if x.value is not None) >= 7, 60, "partition 0 re-keyed twice"
        )
        reader.settle(1.0)
        assert reader.records[out] == []  # upstream partition 1 holds every window back
        produce(kafka_settings, source, events(c, [5, 6, 45], 1))
        # Input partition 0 of the second key_by got to min(40, 45), partition 1 to min(41, 45):
        # the window's watermark is 40, closing [0, 10) and [20, 30).
        reader.wait_for(lambda r: len(r[out]) >= 2, 60, "the [0, 10) and [20, 30) windows")
        reader.settle(1.0)
        got = [json.loads(r.value or b"") for r in reader.records[out]]
    assert sorted((r["window_start"], r["value"]) for r in got) == [(0.0, 5), (20.0, 2)]
    assert worker.counters.late == 0 and worker.counters.dead_letter_decode == 0
