"""A stateless pipeline through the real broker: parse -> filter -> map -> sink, and branch + fan-out."""

from __future__ import annotations

import json
import uuid

import pytest
from pydantic import BaseModel

from cadenza.pipelines import Pipeline
from cadenza.settings import KafkaSettings
from cadenza.testing.pytest_plugin import NewTopic
from cadenza.worker import Worker
from cadenza.worker.config import WorkerConfig
from tests.worker.kafka_io import produce, reading, running

pytestmark = pytest.mark.kafka


class Order(BaseModel):
    id: int
    customer: str
    amount: float


class Priced(BaseModel):
    id: int
    customer: str
    cents: int


def is_big(order: Order) -> bool:
    return order.amount >= 10


def to_cents(order: Order) -> Priced:
    return Priced(id=order.id, customer=order.customer, cents=round(order.amount * 100))


def order(i: int) -> bytes:
    return json.dumps({"id": i, "customer": f"c{i % 7}", "amount": i % 25}).encode()


def test_parse_filter_map_sink_produces_exactly_the_expected_outputs(
    kafka_settings: KafkaSettings, new_topic: NewTopic
) -> None:
    source, sink = new_topic(partitions=3), new_topic(partitions=2)
    pipeline = Pipeline(f"orders-{uuid.uuid4().hex[:6]}", tenant="shop", latency_target="1s")
    pipeline.source(source, value=Order).filter(is_big).map(to_cents).sink(sink)
    records = 600
    keys = [f"c{i % 7}".encode() for i in range(records)]
    produce(kafka_settings, source, [(keys[i], order(i), None) for i in range(records // 2)])
    expected = {
        (
            keys[i],
            json.dumps({"id": i, "customer": f"c{i % 7}", "cents": (i % 25) * 100}, separators=(",", ":")),
        )
        for i in range(records)
        if i % 25 >= 10
    }
    worker = Worker([pipeline], kafka_settings, WorkerConfig(group=f"g-{uuid.uuid4().hex[:8]}"))
    with reading(kafka_settings, [sink]) as reader, running(worker):
        # Half the input was there before the worker joined, half arrives while it runs.
        produce(kafka_settings, source, [(keys[i], order(i), None) for i in range(records // 2, records)])
        reader.wait_for(lambda got: len(got[sink]) >= len(expected), timeout=30, what="all outputs")
        reader.settle(1.0)
    got = [(r.key, (r.value or b"").decode()) for r in reader.records[sink]]
    assert len(got) == len(expected)  # no duplicates in a clean run
    assert set(got) == expected
    assert worker.counters.consumed == records
    assert worker.counters.produced == len(expected)
    assert worker.counters.dead_letter_decode == worker.counters.dead_letter_function == 0


def test_branch_routes_each_record_to_the_first_matching_branch_and_fan_out_copies(
    kafka_settings: KafkaSettings, new_topic: NewTopic
) -> None:
    source = new_topic(partitions=2)
    small, large, everything = new_topic(), new_topic(), new_topic()
    pipeline = Pipeline(f"branches-{uuid.uuid4().hex[:6]}", tenant="shop", latency_target="1s")
    stream = pipeline.source(source, value=Order)
    below, above = stream.branch(lambda o: o.amount < 5, lambda o: o.amount < 20)  # >= 20 dropped
    below.map(lambda o: o.id).sink(small)
    above.flat_map(lambda o: [o.id, -o.id]).sink(large)
    stream.map(lambda o: o.id).sink(everything)
    produce(kafka_settings, source, [(None, order(i), None) for i in range(100)])
    worker = Worker([pipeline], kafka_settings, WorkerConfig(group=f"g-{uuid.uuid4().hex[:8]}"))
    want_small = {i for i in range(100) if i % 25 < 5}
    want_large = {s * i for i in range(100) if 5 <= i % 25 < 20 for s in (1, -1)}
    with reading(kafka_settings, [small, large, everything]) as reader, running(worker):
        reader.wait_for(
            lambda got: (
                len(got[small]) >= len(want_small)
                and len(got[large]) >= len(want_large)
                and len(got[everything]) >= 100
            ),
            timeout=30,
            what="every branch",
        )
        reader.settle(0.5)
    assert sorted(int(r.value or b"") for r in reader.records[small]) == sorted(want_small)
    assert sorted(int(r.value or b"") for r in reader.records[large]) == sorted(want_large)
    assert sorted(int(r.value or b"") for r in reader.records[everything]) == list(range(100))
