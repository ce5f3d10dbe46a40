"""A user's value codec (msgpack here) plugged into a source and a sink, through the real broker."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import msgpack
import pytest
from pydantic import BaseModel

from cadenza import Codec
from cadenza.pipelines import Pipeline, PipelineDefinitionError, describe
from cadenza.schemas import ERROR_HEADER, ERROR_TYPE_HEADER
from cadenza.settings import KafkaSettings
from cadenza.testing.pytest_plugin import NewTopic
from cadenza.worker import Worker
from cadenza.worker.config import WorkerConfig
from tests.worker.kafka_io import produce, reading, running

pytestmark = pytest.mark.kafka


class MsgpackCodec:
    """Values as msgpack maps: decodes to plain data (the worker validates it into the model)."""

    name = "msgpack"

    def __init__(self) -> None:
        self.decoded = 0
        self.encoded = 0

    def decode(
        self, data: bytes, model: type[BaseModel] | None, headers: Sequence[tuple[str, Any]] | None = None
    ) -> Any:
        self.decoded += 1
        return msgpack.unpackb(data, raw=False)

    def encode(self, value: Any) -> bytes:
        self.encoded += 1
        if isinstance(value, BaseModel):
            value = value.model_dump()
        data: bytes = msgpack.packb(value, use_bin_type=True)
        return data


class Order(BaseModel):
    id: int
    amount: float
    ts: float


class Scored(BaseModel):
    id: int
    score: float


def score(order: Order) -> Scored:
    return Scored(id=order.id, score=order.amount * 2)


def test_the_codec_protocol_is_structural() -> None:
    assert isinstance(MsgpackCodec(), Codec)


def test_a_msgpack_source_and_sink_run_end_to_end_and_bad_bytes_are_dead_lettered(
    kafka_settings: KafkaSettings, new_topic: NewTopic
) -> None:
    source, sink = new_topic(), new_topic()
    name = f"msgpack-{uuid.uuid4().hex[:6]}"
    codec = MsgpackCodec()
    pipeline = Pipeline(name, tenant="t", latency_target="1s")
    pipeline.source(source, value=Order, codec=codec).map(score).sink(sink, codec=codec)
    assert "format=msgpack" in describe(pipeline.compile())
    good = [msgpack.packb({"id": i, "amount": i + 0.5, "ts": 1.0}) for i in range(10)]
    bad = [b"\xc1 not msgpack", msgpack.packb({"id": "not a number", "amount": 1, "ts": 1.0})]
    produce(kafka_settings, source, [(None, value, 0) for value in [*good[:5], *bad, *good[5:]]])
    dlq = f"{name}.dlq"
    worker = Worker([pipeline], kafka_settings, WorkerConfig(group=f"g-{uuid.uuid4().hex[:8]}"))
    with running(worker), reading(kafka_settings, [sink, dlq]) as reader:
        reader.wait_for(
            lambda got: len(got[sink]) >= 10 and len(got[dlq]) >= 2, timeout=30, what="10 results, 2 DLQ"
        )
        reader.settle(0.5)
    results = sorted(
        (msgpack.unpackb(r.value or b"", raw=False) for r in reader.records[sink]), key=lambda v: v["id"]
    )
    assert results == [{"id": i, "score": (i + 0.5) * 2} for i in range(10)]
    dead = sorted(reader.records[dlq], key=lambda r: r.value or b"")
    assert sorted(r.value or b"" for r in dead) == sorted(bad)
    reasons = [(r.headers.get(ERROR_HEADER) or b"").decode() for r in dead]
    assert any("codec 'msgpack' cannot decode the value" in reason for reason in reasons), reasons
    assert any("not a valid Order" in reason for reason in reasons), reasons
    assert all(r.headers.get(ERROR_TYPE_HEADER) for r in dead)
    assert codec.decoded == 12
    assert codec.encoded == 10


class Picky(MsgpackCodec):
    """Refuses to encode one value: an encode failure must dead-letter that record alone."""

    name = "picky"

    def encode(self, value: Any) -> bytes:
        if value.id == 3:
            raise ValueError("refuses id 3")
        return super().encode(value)


def test_a_codec_that_raises_on_encode_dead_letters_the_record(
    kafka_settings: KafkaSettings, new_topic: NewTopic
) -> None:
    source, sink = new_topic(), new_topic()
    name = f"encode-{uuid.uuid4().hex[:6]}"
    pipeline = Pipeline(name, tenant="t", latency_target="1s")
    pipeline.source(source, value=Order).map(score).sink(sink, codec=Picky())
    produce(
        kafka_settings,
        source,
        [(None, Order(id=i, amount=1, ts=1).model_dump_json().encode(), 0) for i in range(6)],
    )
    dlq = f"{name}.dlq"
    worker = Worker([pipeline], kafka_settings, WorkerConfig(group=f"g-{uuid.uuid4().hex[:8]}"))
    with running(worker), reading(kafka_settings, [sink, dlq]) as reader:
        reader.wait_for(lambda got: len(got[sink]) >= 5 and len(got[dlq]) >= 1, timeout=30, what="5 + 1 DLQ")
        reader.settle(0.5)
    ids = sorted(msgpack.unpackb(r.value or b"")["id"] for r in reader.records[sink])
    assert ids == [0, 1, 2, 4, 5]
    [dead] = reader.records[dlq]
    reason = (dead.headers.get(ERROR_HEADER) or b"").decode()
    assert "codec 'picky' cannot encode Scored: ValueError: refuses id 3" in reason


def test_format_and_codec_together_are_refused() -> None:
    pipeline = Pipeline("both", tenant="t", latency_target="1s")
    with pytest.raises(PipelineDefinitionError, match="format= or codec=, not both"):
        pipeline.source("in", value=Order, format="json", codec=MsgpackCodec())


def test_an_object_that_is_not_a_codec_is_refused_naming_what_it_lacks() -> None:
    pipeline = Pipeline("notcodec", tenant="t", latency_target="1s")
    with pytest.raises(PipelineDefinitionError, match="lacks decode, encode"):
        pipeline.source("in", value=Order, codec=object())  # type: ignore[call-overload]
