"""JSON and Avro codecs: round trips, an independent reader, fingerprints, and total decoding."""

from __future__ import annotations

import contextlib
import io
import json
import pickle
from datetime import UTC, date, datetime
from typing import Any
from uuid import UUID

import avro.io
import avro.schema
import pytest
from fastavro.schema import fingerprint, to_parsing_canonical_form
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from cadenza.errors import ConfigError
from cadenza.schemas import (
    ERROR_HEADER,
    ERROR_TYPE_HEADER,
    SCHEMA_FP_HEADER,
    AvroCodec,
    DecodeError,
    EncodeError,
    JsonCodec,
    RegistryAvroCodec,
    ValueCodec,
    avro_mapping,
    codec_for,
    schema_fingerprint,
)
from tests.schemas.models import Address, Flat, Node, Order, Priority, Side
from tests.schemas.strategies import FLATS, ORDERS

ORDER_AVRO = AvroCodec(Order)
ORDER_JSON = JsonCodec(Order)
FLAT_AVRO = AvroCodec(Flat)
RAW_JSON = JsonCodec()
REFERENCE_SCHEMA = avro.schema.parse(json.dumps(ORDER_AVRO.schema))
ORDER_MAPPING = avro_mapping(Order)

EXAMPLE = Order.model_validate(
    {
        "id": 42,
        "price": 101.25,
        "payload": b"\x00\x01\xfe",
        "home": {"street": "Main St"},
        "work": {"street": "Dock 4", "zip_code": "1011"},
        "side": "sell",
        "priority": Priority.LOW,
        "placed_at": datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=UTC),
        "trade_day": date(2024, 5, 6),
        "uid": UUID("12345678-1234-5678-1234-567812345678"),
        "kind": "market",
        "venue": "x-1",
        "ref": 7,
        "tree": {"value": 1, "children": [{"value": 2}, {"value": 3, "children": [{"value": 4}]}]},
        "history": [Priority.HIGH, Priority.LOW],
        "scores": {"a": [1, 2], "b": []},
        "tags": ["t1"],
        "attributes": {"x": 0.5},
    }
)

SLOW = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def reference_read(data: bytes) -> Any:
    """Decode with the Apache reference implementation, independent of fastavro."""
    reader = avro.io.DatumReader(REFERENCE_SCHEMA, REFERENCE_SCHEMA)
    return reader.read(avro.io.BinaryDecoder(io.BytesIO(data)))


def from_reference(raw: Any) -> Order:
    """The documented mapping back to the model (enum symbols that are member names -> members)."""
    assert ORDER_MAPPING.from_avro is not None
    return Order.model_validate(ORDER_MAPPING.from_avro(raw))


# -- round trips -------------------------------------------------------------------------------------


def test_example_round_trips_in_both_formats() -> None:
    assert ORDER_AVRO.decode(ORDER_AVRO.encode(EXAMPLE)) == EXAMPLE
    assert ORDER_JSON.decode(ORDER_JSON.encode(EXAMPLE)) == EXAMPLE


@SLOW
@given(ORDERS)
def test_avro_round_trip(order: Order) -> None:
    data = ORDER_AVRO.encode(order)
    assert isinstance(data, bytes)
    assert ORDER_AVRO.decode(data, ORDER_AVRO.headers()) == order


@SLOW
@given(ORDERS)
def test_json_round_trip(order: Order) -> None:
    assert ORDER_JSON.decode(ORDER_JSON.encode(order)) == order


@given(FLATS)
def test_flat_model_round_trips(flat: Flat) -> None:
    assert FLAT_AVRO.decode(FLAT_AVRO.encode(flat)) == flat


JSON_SCALARS = st.integers() | st.text() | st.none() | st.booleans()


@given(st.dictionaries(st.text(max_size=5), JSON_SCALARS, max_size=5))
def test_raw_json_round_trip(value: dict[str, Any]) -> None:
    assert RAW_JSON.decode(RAW_JSON.encode(value)) == value


def test_naive_datetimes_are_written_as_utc() -> None:
    class Stamp(BaseModel):
        at: datetime

    codec = AvroCodec(Stamp)
    decoded = codec.decode(codec.encode(Stamp(at=datetime(2024, 1, 1, 12, 0))))
    assert decoded.at == datetime(2024, 1, 1, 12, 0, tzinfo=UTC)
    assert decoded.at.utcoffset() is not None


def test_sub_millisecond_digits_are_dropped() -> None:
    class Stamp(BaseModel):
        at: datetime

    codec = AvroCodec(Stamp)
    decoded = codec.decode(codec.encode(Stamp(at=datetime(2024, 1, 1, 0, 0, 0, 123456, tzinfo=UTC))))
    assert decoded.at == datetime(2024, 1, 1, 0, 0, 0, 123000, tzinfo=UTC)


def test_models_with_use_enum_values_still_encode() -> None:
    class Raw(BaseModel, use_enum_values=True):
        p: Priority
        s: Side

    codec = AvroCodec(Raw)
    assert codec.decode(codec.encode(Raw(p=Priority.HIGH, s=Side.SELL))) == Raw(p=Priority.HIGH, s=Side.SELL)


def test_aliases_are_the_wire_names_in_both_formats() -> None:
    assert json.loads(ORDER_JSON.encode(EXAMPLE))["id"] == 42
    assert reference_read(ORDER_AVRO.encode(EXAMPLE))["id"] == 42


# -- the independent reader -------------------------------------------------------------------------


def test_reference_implementation_reads_the_example() -> None:
    raw = reference_read(ORDER_AVRO.encode(EXAMPLE))
    assert raw["priority"] == "LOW"
    assert raw["side"] == "sell"
    assert raw["placed_at"] == datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=UTC)
    assert raw["payload"] == b"\x00\x01\xfe"
    assert raw["tree"]["children"][1]["children"][0]["value"] == 4
    assert from_reference(raw) == EXAMPLE


@SLOW
@given(ORDERS)
def test_reference_implementation_reads_what_avro_codec_writes(order: Order) -> None:
    assert from_reference(reference_read(ORDER_AVRO.encode(order))) == order


# -- fingerprints -----------------------------------------------------------------------------------


def test_fingerprint_header_is_the_canonical_crc64_fingerprint() -> None:
    expected = bytes.fromhex(fingerprint(to_parsing_canonical_form(ORDER_AVRO.schema), "CRC-64-AVRO"))
    assert ORDER_AVRO.headers() == [(SCHEMA_FP_HEADER, expected)]
    assert len(expected) == 8
    assert schema_fingerprint(ORDER_AVRO.schema) == expected


def test_fingerprint_agrees_with_the_reference_implementation() -> None:
    # Without logical types, the Apache Python implementation computes the very same fingerprint.
    flat = avro.schema.parse(json.dumps(FLAT_AVRO.schema))
    assert flat.fingerprint() == FLAT_AVRO.fingerprint
    # With them it keeps {"type": "long"} where the spec's [PRIMITIVES] rule (and Java, and fastavro)
    # write "long"; apart from that the canonical forms are identical. cadenza follows Java.
    reference_form = REFERENCE_SCHEMA.canonical_form
    for primitive in ("long", "int", "string"):
        reference_form = reference_form.replace(f'{{"type":"{primitive}"}}', f'"{primitive}"')
    assert reference_form == to_parsing_canonical_form(ORDER_AVRO.schema)


def test_headers_are_a_fresh_list_each_time() -> None:
    first = ORDER_AVRO.headers()
    first.append(("x", b"y"))
    assert ORDER_AVRO.headers() == [(SCHEMA_FP_HEADER, ORDER_AVRO.fingerprint)]
    assert ORDER_JSON.headers() == []


def test_fingerprint_mismatch_raises_decode_error() -> None:
    data = ORDER_AVRO.encode(EXAMPLE)
    with pytest.raises(DecodeError, match="another Avro schema") as info:
        ORDER_AVRO.decode(data, [(SCHEMA_FP_HEADER, FLAT_AVRO.fingerprint)])
    assert info.value.error_type == "SchemaMismatch"
    with pytest.raises(DecodeError):
        ORDER_AVRO.decode(data, [("other", b"1"), (SCHEMA_FP_HEADER, None)])
    # Matching header, unrelated headers, or none at all: read normally.
    assert ORDER_AVRO.decode(data, [("trace", b"abc"), *ORDER_AVRO.headers()]) == EXAMPLE
    assert ORDER_AVRO.decode(data, None) == EXAMPLE


# -- total decoding -----------------------------------------------------------------------------------


@pytest.mark.parametrize("data", [b"", b"\xff", b"\xff" * 9, b"\x02\x04hi", b"garbage" * 10])
def test_garbage_avro_raises_decode_error(data: bytes) -> None:
    with pytest.raises(DecodeError):
        ORDER_AVRO.decode(data)


def test_trailing_bytes_raise_decode_error() -> None:
    with pytest.raises(DecodeError, match="trailing") as info:
        ORDER_AVRO.decode(ORDER_AVRO.encode(EXAMPLE) + b"\x00")
    assert info.value.error_type == "TrailingBytes"


@settings(max_examples=30, deadline=None)
@given(ORDERS, st.data())
def test_every_truncation_raises_decode_error(order: Order, data: st.DataObject) -> None:
    encoded = ORDER_AVRO.encode(order)
    cut = data.draw(st.integers(min_value=0, max_value=len(encoded) - 1))
    with pytest.raises(DecodeError):
        ORDER_AVRO.decode(encoded[:cut])


def test_every_prefix_of_the_example_raises_decode_error() -> None:
    encoded = ORDER_AVRO.encode(EXAMPLE)
    for cut in range(len(encoded)):
        with pytest.raises(DecodeError):
            ORDER_AVRO.decode(encoded[:cut])


def test_invalid_utf8_string_raises_decode_error() -> None:
    data = FLAT_AVRO.encode(Flat(name="ab", count=1, ratio=0.0, ok=True))
    assert data[:3] == b"\x04ab"
    with pytest.raises(DecodeError):
        FLAT_AVRO.decode(b"\x04\xff\xfe" + data[3:])


def test_validation_failure_after_a_clean_read_raises_decode_error() -> None:
    class Positive(BaseModel):
        n: int

        def model_post_init(self, context: Any) -> None:
            if self.n < 0:
                raise ValueError("n must be positive")

    class Any64(BaseModel):
        n: int

    data = AvroCodec(Any64).encode(Any64(n=-1))
    with pytest.raises(DecodeError) as info:
        AvroCodec(Positive).decode(data)
    assert info.value.error_type == "ValidationError"


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"not json",
        b"\xff\xfe",
        b'{"id": "abc", "price": 1.0}',
        b'{"price": 1.0}',
        b"[1, 2]",
        b'{"id": 1, "price": "x", "home": {"street": "s"}, "placed_at": 0, "uid": "nope"}',
    ],
)
def test_bad_json_raises_decode_error(data: bytes) -> None:
    with pytest.raises(DecodeError) as info:
        ORDER_JSON.decode(data)
    assert info.value.error_type


@pytest.mark.parametrize("data", [b"", b"[1]", b'"text"', b"12", b"{", b"\xff"])
def test_raw_json_needs_an_object(data: bytes) -> None:
    with pytest.raises(DecodeError):
        RAW_JSON.decode(data)


def test_missing_field_message_names_the_field() -> None:
    with pytest.raises(DecodeError, match="placed_at") as info:
        ORDER_JSON.decode(b'{"id": 1, "price": 1.0, "home": {"street": "s"}, "uid": "' + b"1" * 32 + b'"}')
    assert info.value.error_type == "ValidationError"


CODECS: list[ValueCodec[Any]] = [ORDER_AVRO, FLAT_AVRO, ORDER_JSON, RAW_JSON, AvroCodec(Node)]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(CODECS), st.binary(max_size=200))
def test_random_bytes_raise_only_decode_error(codec: ValueCodec[Any], data: bytes) -> None:
    with contextlib.suppress(DecodeError):
        codec.decode(data)


@settings(max_examples=100, deadline=None)
@given(FLATS, st.binary(max_size=4), st.integers(min_value=0, max_value=40))
def test_corrupted_avro_raises_only_decode_error(flat: Flat, noise: bytes, position: int) -> None:
    data = bytearray(FLAT_AVRO.encode(flat))
    data[position:position] = noise
    with contextlib.suppress(DecodeError):
        FLAT_AVRO.decode(bytes(data))


# -- encoding errors, errors themselves, selection ----------------------------------------------------


def test_ints_beyond_64_bits_raise_encode_error() -> None:
    with pytest.raises(EncodeError) as info:
        FLAT_AVRO.encode(Flat(name="x", count=2**64, ratio=0.0, ok=True))
    assert info.value.error_type


def test_non_model_value_raises_encode_error() -> None:
    with pytest.raises(EncodeError):
        FLAT_AVRO.encode({"name": "x"})  # type: ignore[arg-type]
    with pytest.raises(EncodeError):
        RAW_JSON.encode({"x": object()})


def test_decode_error_headers_and_pickling() -> None:
    with pytest.raises(DecodeError) as info:
        ORDER_JSON.decode(b"{}")
    error = info.value
    headers = dict(error.as_headers())
    assert headers[ERROR_TYPE_HEADER] == b"ValidationError"
    assert headers[ERROR_HEADER].startswith(b"invalid JSON Order")
    assert len(headers[ERROR_HEADER]) <= 2000
    clone = pickle.loads(pickle.dumps(error))
    assert isinstance(clone, DecodeError)
    assert (str(clone), clone.error_type) == (str(error), error.error_type)


def test_codec_for_selects_by_format() -> None:
    assert isinstance(codec_for("json", Order), JsonCodec)
    assert isinstance(codec_for("json"), JsonCodec)
    avro_codec = codec_for("avro", Order, namespace="com.example")
    assert isinstance(avro_codec, AvroCodec)
    assert avro_codec.schema["namespace"] == "com.example"


def test_codec_for_refuses_bad_combinations() -> None:
    with pytest.raises(ConfigError):
        codec_for("avro")
    with pytest.raises(ConfigError):
        codec_for("xml", Order)  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        codec_for("json", Order, registry_client=object())  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        codec_for("avro", Order, registry_client=object())  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        JsonCodec(dict)  # type: ignore[type-var]


def test_codec_for_with_a_registry_client() -> None:
    from tests.schemas.fakes import FakeRegistry  # noqa: PLC0415

    codec = codec_for("avro", Address, FakeRegistry(), subject="addresses-value")
    assert isinstance(codec, RegistryAvroCodec)
    assert codec.decode(codec.encode(Address(street="s"))) == Address(street="s")
