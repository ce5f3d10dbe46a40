"""Poison records and failing user functions go to the dead-letter topic; the worker goes on."""

from __future__ import annotations

import json
import uuid

import pytest
from pydantic import BaseModel

from cadenza.pipelines import Pipeline
from cadenza.schemas import ERROR_HEADER, ERROR_TYPE_HEADER
from cadenza.settings import KafkaSettings
from cadenza.testing.pytest_plugin import NewTopic
from cadenza.worker import Worker
from cadenza.worker.config import WorkerConfig
from cadenza.worker.engine.dead_letter import (
    OPERATOR_HEADER,
    SOURCE_OFFSET_HEADER,
    SOURCE_PARTITION_HEADER,
    SOURCE_TOPIC_HEADER,
)
from tests.worker.kafka_io import Outgoing, produce, reading, running

pytestmark = pytest.mark.kafka


class Payment(BaseModel):
    id: int
    amount: float


def checked(payment: Payment) -> dict[str, float]:
    if payment.id % 10 == 3:
        raise ValueError(f"payment {payment.id} is on the blocklist")
    return {"id": payment.id, "net": payment.amount * 0.9}


POISON = [
    b"\xff\xfe\x00 not JSON at all",  # undecodable bytes
    b'{"id": "seven", "amount": 1.0}',  # JSON, but not a Payment
    b'{"id": 8}',  # a required field missing
    b"[1, 2, 3]",
]


def test_poison_values_and_failing_functions_are_dead_lettered_with_coordinates(
    kafka_settings: KafkaSettings, new_topic: NewTopic
) -> None:
    source, sink = new_topic(partitions=2), new_topic()
    name = f"payments-{uuid.uuid4().hex[:6]}"
    pipeline = Pipeline(name, tenant="bank", latency_target="1s")
    pipeline.source(source, value=Payment).map(checked).sink(sink)
    outgoing: list[Outgoing] = []
    kinds: list[str] = []
    for i in range(60):
        outgoing.append((f"k{i}".encode(), json.dumps({"id": i, "amount": i}).encode(), i % 2))
        kinds.append("fails" if i % 10 == 3 else "good")
        if i % 15 == 0:
            poison = POISON[(i // 15) % len(POISON)]
            outgoing.append((b"poison", poison, i % 2))
            kinds.append("poison")
    offsets = produce(kafka_settings, source, outgoing)
    good = [i for i in range(60) if i % 10 != 3]
    dead = len(outgoing) - kinds.count("good")
    worker = Worker([pipeline], kafka_settings, WorkerConfig(group=f"g-{uuid.uuid4().hex[:8]}"))
    dead_letters = f"{name}.dlq"
    with running(worker), reading(kafka_settings, [sink, dead_letters]) as reader:
        reader.wait_for(
            lambda got: len(got[sink]) >= len(good) and len(got[dead_letters]) >= dead,
            timeout=30,
            what="outputs and dead letters",
        )
        reader.settle(1.0)

    assert sorted(json.loads(r.value or b"")["id"] for r in reader.records[sink]) == good
    expected = {
        (outgoing[n][2], offsets[n]): (kinds[n], outgoing[n][0], outgoing[n][1])
        for n in range(len(outgoing))
        if kinds[n] != "good"
    }
    seen: set[tuple[int | None, int]] = set()
    assert len(expected) == dead
    for record in reader.records[dead_letters]:
        coordinates = (int(record.header(SOURCE_PARTITION_HEADER)), int(record.header(SOURCE_OFFSET_HEADER)))
        kind, key, value = expected[coordinates]
        seen.add(coordinates)
        assert record.header(SOURCE_TOPIC_HEADER) == source
        assert (record.key, record.value) == (key, value)  # the consumed record, unchanged
        assert record.header(ERROR_HEADER)
        if kind == "poison":
            assert record.header(OPERATOR_HEADER) == "1-source"
            assert record.header(ERROR_TYPE_HEADER) in ("ValidationError", "TypeError")
        else:
            assert record.header(OPERATOR_HEADER) == "2-map"
            assert record.header(ERROR_TYPE_HEADER) == "ValueError"
            assert "is on the blocklist" in record.header(ERROR_HEADER)
    assert seen == set(expected)
    assert len(reader.records[dead_letters]) == len(expected)
    assert worker.counters.dead_letter_decode == kinds.count("poison")
    assert worker.counters.dead_letter_function == kinds.count("fails")
    assert worker.counters.consumed == len(outgoing)
