"""Fetch lanes through the real broker: an urgent pipeline and a bulk one on one worker, each lane
its own consumer in the one group.

The bulk topic is flooded with many times the buffer while urgent records stream in: every output
arrives exactly once, the buffer bound holds across both lanes, each lane's consumer owns only its
own topics' partitions, the flood pauses only bulk partitions, and the offsets of both lanes are
committed in the one group (each through the consumer that owns the partition).
"""

from __future__ import annotations

import json
import threading
import time
import uuid

import pytest
from confluent_kafka import TopicPartition
from pydantic import BaseModel

from cadenza.infra.kafka.clients import make_consumer
from cadenza.infra.metrics import PrometheusExporter
from cadenza.pipelines import Pipeline
from cadenza.settings import KafkaSettings
from cadenza.testing.pytest_plugin import NewTopic
from cadenza.worker import Worker
from cadenza.worker.config import WorkerConfig
from cadenza.worker.parts import WorkerParts
from tests.worker.kafka_io import produce, reading, running

pytestmark = pytest.mark.kafka

PARTITIONS = 2


class Item(BaseModel):
    id: int


def item(i: int) -> bytes:
    return json.dumps({"id": i}).encode()


def committed(settings: KafkaSettings, group: str, topic: str) -> int:
    consumer, _ = make_consumer(settings, group)
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
    finally:
        consumer.close()
    return sum(max(tp.offset, 0) for tp in found)


def slow(x: Item) -> int:
    time.sleep(0.0005)  # the bulk backlog takes a while to drain: urgent records arrive during it
    return x.id


@pytest.mark.slow(
    "drains a 3,000-record flood through paused and resumed partitions of the embedded broker, "
    "whose fetch cost grows with what a partition holds"
)
def test_two_lanes_lose_nothing_keep_the_bound_and_commit_through_their_own_consumer(
    kafka_settings: KafkaSettings, new_topic: NewTopic
) -> None:
    urgent_in, bulk_in = new_topic(partitions=PARTITIONS), new_topic(partitions=PARTITIONS)
    urgent_out, bulk_out = new_topic(), new_topic()
    suffix = uuid.uuid4().hex[:6]
    urgent = Pipeline(f"urgent-{suffix}", tenant="LS", latency_target="200ms")
    urgent.source(urgent_in, value=Item).map(lambda x: x.id).sink(urgent_out)
    bulk = Pipeline(f"bulk-{suffix}", tenant="BA", latency_target="10s")
    bulk.source(bulk_in, value=Item).map(slow).sink(bulk_out)
    flood, trickle, max_buffered = 3000, 200, 200
    produce(kafka_settings, bulk_in, [(None, item(i), i % PARTITIONS) for i in range(flood)])
    group = f"g-lanes-{suffix}"
    worker = Worker(
        [urgent, bulk],
        kafka_settings,
        WorkerConfig(group=group, max_buffered=max_buffered, batch_size=500, policy="cameo", lanes="auto"),
        parts=WorkerParts(exporter=(exporter := PrometheusExporter())),
    )
    assert [lane.topics for lane in worker.layout.lanes] == [(urgent_in,), (bulk_in,)]
    # Each pipeline's outputs go through its lane's producer; the bulk one lingers longer.
    assert [
        (lane.name, urgent_out in lane.topics, bulk_out in lane.topics)
        for lane in worker.layout.produce_lanes
    ] == [
        ("producer", True, False),
        ("producer-lane1", False, True),
    ]
    assert worker.layout.produce_lanes[1].linger_ms > worker.layout.produce_lanes[0].linger_ms

    def stream_urgent() -> None:
        for start in range(0, trickle, 20):
            produce(
                kafka_settings, urgent_in, [(None, item(i), i % PARTITIONS) for i in range(start, start + 20)]
            )
            time.sleep(0.05)

    with reading(kafka_settings, [urgent_out, bulk_out]) as reader, running(worker):
        assert worker.wait_assigned(30)
        # Assigned means every lane joined: the urgent lane's partitions are here too, whichever lane
        # the group answered first.
        lanes = worker.membership.fetcher.consumers
        assert len(lanes) == 2 and all(worker.membership.rebalance.owned(consumer) for consumer in lanes)
        streaming = threading.Thread(target=stream_urgent, daemon=True)
        streaming.start()
        reader.wait_for(
            lambda got: len(got[urgent_out]) >= trickle and len(got[bulk_out]) >= flood,
            timeout=90,
            what="every output of both lanes",
        )
        streaming.join(10)
        fetcher = worker.membership.fetcher
        assert len(fetcher.consumers) == 2
        # Each lane's consumer was given its own topics' partitions only (the worker's consumers are
        # not called from the test's thread: a call beside the worker's consume blocks).
        owned = [{t for t, _ in worker.membership.rebalance.owned(c)} for c in fetcher.consumers]
        assert owned == [{urgent_in}, {bulk_in}]
        # The flood paused bulk partitions only: the urgent lane was never held back.
        assert worker.counters.pauses >= 1
        reader.settle(1.5)  # at least one more second: librdkafka's statistics of the whole run
        requests = {
            (sample.labels["client"], sample.labels["request"]): sample.value
            for metric in exporter.registry.collect()
            for sample in metric.samples
            if sample.name == "cadenza_kafka_requests_total"
        }
    urgent_ids = sorted(int(r.value or b"-1") for r in reader.records[urgent_out])
    bulk_ids = sorted(int(r.value or b"-1") for r in reader.records[bulk_out])
    assert urgent_ids == list(range(trickle)) and bulk_ids == list(range(flood))
    assert 0 < worker.counters.peak_buffered <= max_buffered
    # What each client asked of the broker: both lanes fetched, each lane's producer produced its
    # pipeline's results (the bulk one in batches: fewer requests than results).
    assert requests[("lane0", "Fetch")] > 0 and requests[("lane1", "Fetch")] > 0
    assert 0 < requests[("producer", "Produce")] <= trickle
    assert 0 < requests[("producer-lane1", "Produce")] < flood
    # Both lanes' offsets are in the one group, at the end of each topic.
    assert committed(kafka_settings, group, urgent_in) == trickle
    assert committed(kafka_settings, group, bulk_in) == flood


def test_alike_targets_keep_a_single_consumer(kafka_settings: KafkaSettings, new_topic: NewTopic) -> None:
    a_in, b_in, out = new_topic(partitions=PARTITIONS), new_topic(partitions=PARTITIONS), new_topic()
    suffix = uuid.uuid4().hex[:6]
    a = Pipeline(f"a-{suffix}", tenant="a", latency_target="1s")
    a.source(a_in, value=Item).map(lambda x: x.id).sink(out)
    b = Pipeline(f"b-{suffix}", tenant="b", latency_target="2s")
    b.source(b_in, value=Item).map(lambda x: -1 - x.id).sink(out)
    produce(kafka_settings, a_in, [(None, item(i), None) for i in range(50)])
    produce(kafka_settings, b_in, [(None, item(i), None) for i in range(50)])
    worker = Worker([a, b], kafka_settings, WorkerConfig(group=f"g-one-{suffix}", lanes="auto"))
    assert len(worker.layout.lanes) == 1
    with reading(kafka_settings, [out]) as reader, running(worker):
        reader.wait_for(lambda got: len(got[out]) >= 100, timeout=60, what="every output")
        fetcher = worker.membership.fetcher
        assert len(fetcher.consumers) == 1
        assert {t for t, _ in worker.membership.rebalance.owned(fetcher.consumer)} == {a_in, b_in}
    assert sorted(int(r.value or b"0") for r in reader.records[out]) == list(range(-50, 50))


class Keyed(BaseModel):
    id: int
    ts: float


@pytest.mark.slow("two workers with two lanes each join one group and rebalance")
def test_two_workers_hold_both_sides_of_a_join_partition_when_one_side_is_also_read_urgently(
    kafka_settings: KafkaSettings, new_topic: NewTopic, caplog: pytest.LogCaptureFixture
) -> None:
    # LS reads `clicks` at 200 ms; BA joins `clicks` with `orders` at 10 s. Were the join's two
    # topics read by different lanes (consumers), the group's range assignor would order each
    # topic's members independently, and in most rounds one worker got clicks[p] and the other
    # orders[p] (before the fix: 3 of 4 rounds).
    parts = 4
    clicks, orders = new_topic(partitions=parts), new_topic(partitions=parts)
    suffix = uuid.uuid4().hex[:6]
    ls = Pipeline(f"ls-{suffix}", tenant="LS", latency_target="200ms")
    ls.source(clicks, value=Keyed, key=str).map(lambda x: x.id).sink(new_topic())
    ba = Pipeline(f"ba-{suffix}", tenant="BA", latency_target="10s")
    left = ba.source(clicks, value=Keyed, key=str, timestamp="ts")
    right = ba.source(orders, value=Keyed, key=str, timestamp="ts")
    left.join(right, within="1s", joiner=lambda a, b: {"a": a.id, "b": b.id}).sink(new_topic())
    jobs = new_topic(partitions=parts)
    ba.source(jobs, value=Keyed).map(lambda x: x.id).sink(new_topic())
    everything = {(topic, p) for topic in (clicks, orders, jobs) for p in range(parts)}
    for round_ in range(3):
        group = f"g-join-lanes-{suffix}-{round_}"
        one, two = (
            Worker([ls, ba], kafka_settings, WorkerConfig(group=group, lanes="auto")) for _ in range(2)
        )
        assert [lane.topics for lane in one.layout.lanes] == [tuple(sorted((clicks, orders))), (jobs,)]
        with running(one), running(two):
            deadline = time.monotonic() + 60
            while not (one.assignment and two.assignment and one.assignment | two.assignment == everything):
                assert time.monotonic() < deadline, f"round {round_}: {one.assignment} {two.assignment}"
                time.sleep(0.2)
            held = [worker.assignment for worker in (one, two)]
        for assignment in held:
            sides = [{p for t, p in assignment if t == topic} for topic in (clicks, orders)]
            assert sides[0] == sides[1], held
        # The join made the group's assignor range (eager): the worker knew, so it took its
        # assignments whole instead of having the client refuse (and log a warning) every time.
        assert one.membership.rebalance.eager and two.membership.rebalance.eager
    refused = [r.getMessage() for r in caplog.records if "assign() call failed" in r.getMessage()]
    assert not refused, refused[:2]
