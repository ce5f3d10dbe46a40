"""Confluent wire-format framing, against an in-memory registry (no network)."""

from __future__ import annotations

import contextlib
import json
import struct
from typing import TYPE_CHECKING

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from cadenza.errors import ConfigError
from cadenza.schemas import (
    MAGIC_BYTE,
    AvroCodec,
    DecodeError,
    RegistryAvroCodec,
    SchemaRegistryLike,
    avro_schema,
)
from tests.schemas.fakes import FakeRegistry, FakeSchema
from tests.schemas.models import Address, Flat, Node
from tests.schemas.strategies import FLATS

if TYPE_CHECKING:
    from confluent_kafka.schema_registry import SchemaRegistryClient

    def _real_client_fits(client: SchemaRegistryClient) -> SchemaRegistryLike:
        """Checked by mypy only: the real client satisfies the protocol the codec is typed against."""
        return client

    def _fake_client_fits(client: FakeRegistry) -> SchemaRegistryLike:
        return client


def _address_v2() -> type[BaseModel]:
    class Address(BaseModel):
        """Version 2 of tests.schemas.models.Address (same Avro name), plus a field with a default."""

        street: str
        zip_code: str | None = None
        country: str = "NL"

    return Address


AddressV2 = _address_v2()


def test_frame_is_magic_id_then_the_plain_avro_body() -> None:
    registry = FakeRegistry()
    codec = RegistryAvroCodec(Flat, registry, "flats-value")
    value = Flat(name="a", count=3, ratio=0.5, ok=True)
    data = codec.encode(value)
    assert data[0] == MAGIC_BYTE == 0
    assert struct.unpack(">I", data[1:5])[0] == codec.schema_id == 100
    assert data[5:] == AvroCodec(Flat).encode(value)
    assert codec.decode(data) == value
    assert codec.headers() == []


def test_schema_is_registered_once_under_the_subject() -> None:
    registry = FakeRegistry()
    codec = RegistryAvroCodec(Flat, registry, "flats-value")
    for count in range(5):
        codec.encode(Flat(name="a", count=count, ratio=0.0, ok=False))
    assert registry.calls == ["register_schema"]
    ((subject, schema_str),) = registry.ids
    assert subject == "flats-value"
    assert json.loads(schema_str) == avro_schema(Flat)
    assert registry.by_id[100].schema_type == "AVRO"


def test_a_consumer_reads_its_own_schema_without_registering() -> None:
    registry = FakeRegistry()
    producer = RegistryAvroCodec(Flat, registry, "flats-value")
    data = producer.encode(Flat(name="a", count=1, ratio=1.0, ok=True))
    consumer = RegistryAvroCodec(Flat, registry, "flats-value")
    registry.calls.clear()
    for _ in range(3):
        assert consumer.decode(data).count == 1
    assert registry.calls == ["get_schema"]  # fetched once, then cached


def test_lookup_instead_of_register() -> None:
    registry = FakeRegistry()
    codec = RegistryAvroCodec(Flat, registry, "flats-value", auto_register=False)
    with pytest.raises(Exception, match="not found"):
        codec.encode(Flat(name="a", count=1, ratio=1.0, ok=True))
    RegistryAvroCodec(Flat, registry, "flats-value").schema_id  # noqa: B018 - registers
    assert codec.schema_id == 100
    assert registry.calls[-1] == "lookup_schema"


def test_records_of_an_older_schema_are_resolved_into_the_model() -> None:
    registry = FakeRegistry()
    old = RegistryAvroCodec(Address, registry, "addresses-value")
    new = RegistryAvroCodec(AddressV2, registry, "addresses-value")
    data = old.encode(Address(street="Dam 1", zip_code="1012"))
    assert new.decode(data).model_dump() == {"street": "Dam 1", "zip_code": "1012", "country": "NL"}
    newer = new.encode(AddressV2.model_validate({"street": "Dam 2", "country": "BE"}))
    assert old.decode(newer) == Address(street="Dam 2")
    assert old.schema_id != new.schema_id


def test_incompatible_writer_schema_raises_decode_error() -> None:
    registry = FakeRegistry()
    flats = RegistryAvroCodec(Flat, registry, "x-value")
    addresses = RegistryAvroCodec(Address, registry, "x-value")
    with pytest.raises(DecodeError):
        addresses.decode(flats.encode(Flat(name="", count=0, ratio=0, ok=True)))


@pytest.mark.parametrize(
    ("data", "error_type"),
    [
        (b"", "ShortFrame"),
        (b"\x00\x00\x00", "ShortFrame"),
        (b"\x01\x00\x00\x00\x64\x00", "BadMagicByte"),
        (b"\x00\x00\x00\x03\xe7\x00", "UnknownSchema"),
    ],
)
def test_bad_frames_raise_decode_error(data: bytes, error_type: str) -> None:
    codec = RegistryAvroCodec(Flat, FakeRegistry(), "flats-value")
    with pytest.raises(DecodeError) as info:
        codec.decode(data)
    assert info.value.error_type == error_type


def test_unknown_ids_are_remembered() -> None:
    registry = FakeRegistry()
    codec = RegistryAvroCodec(Flat, registry, "flats-value")
    for _ in range(3):
        with pytest.raises(DecodeError):
            codec.decode(b"\x00\x00\x00\x03\xe7\x00")
    assert registry.calls == ["get_schema"]


def test_registry_outage_is_not_a_decode_error() -> None:
    registry = FakeRegistry()
    data = RegistryAvroCodec(Flat, registry, "flats-value").encode(Flat(name="a", count=1, ratio=1, ok=True))
    registry.outage = True
    with pytest.raises(ConnectionError):
        RegistryAvroCodec(Flat, registry, "flats-value").decode(data)


def test_non_avro_and_referencing_schemas_raise_decode_error() -> None:
    registry = FakeRegistry()
    json_id = registry.add("s", FakeSchema('{"type": "object"}', schema_type="JSON"))
    ref_id = registry.add("s", FakeSchema('"string"', references=[{"name": "x"}]))
    bad_id = registry.add("s", FakeSchema("{not avro"))
    codec = RegistryAvroCodec(Flat, registry, "s")
    for schema_id, error_type in ((json_id, "SchemaTypeMismatch"), (ref_id, "UnsupportedSchema")):
        with pytest.raises(DecodeError) as info:
            codec.decode(b"\x00" + schema_id.to_bytes(4, "big") + b"\x00")
        assert info.value.error_type == error_type
    with pytest.raises(DecodeError):
        codec.decode(b"\x00" + bad_id.to_bytes(4, "big") + b"\x00")


def test_recursive_writer_schemas_nested_too_deep_raise_decode_error() -> None:
    registry = FakeRegistry()
    codec = RegistryAvroCodec(Node, registry, "nodes-value")
    frame = codec.encode(Node(value=1))[:5]
    body = b"\x00\x02" * 50_000 + b"\x00\x00" + b"\x00" * 50_000  # a hostile, deeply nested tree
    with pytest.raises(DecodeError):
        RegistryAvroCodec(Node, registry, "nodes-value").decode(frame + body)


def test_subject_is_required() -> None:
    with pytest.raises(ConfigError):
        RegistryAvroCodec(Flat, FakeRegistry(), "")


@settings(max_examples=50, deadline=None)
@given(FLATS)
def test_round_trip(value: Flat) -> None:
    codec = RegistryAvroCodec(Flat, FakeRegistry(), "flats-value")
    assert codec.decode(codec.encode(value)) == value


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64))
def test_random_frames_raise_only_decode_error(data: bytes) -> None:
    registry = FakeRegistry()
    codec = RegistryAvroCodec(Flat, registry, "flats-value")
    codec.schema_id  # noqa: B018 - registers id 100, so some random frames hit a real schema
    with contextlib.suppress(DecodeError):
        codec.decode(b"\x00\x00\x00\x00\x64" + data)
    with contextlib.suppress(DecodeError):
        codec.decode(data)
