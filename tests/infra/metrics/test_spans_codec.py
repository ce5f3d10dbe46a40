"""The span record: derivation from a run, Avro round trip, and the schema file as the contract."""

from __future__ import annotations

import io
import json
from importlib.resources import files
from typing import Any

import avro.io
import avro.schema
import pytest

from cadenza.infra.metrics.spans import SPAN_CODEC, Span, decode_span, encode_span, span_key
from cadenza.schemas import SCHEMA_FP_HEADER, DecodeError, EncodeError, schema_fingerprint

SPANS_AVSC_TEXT = files("cadenza.schemas").joinpath("spans.avsc").read_text(encoding="utf-8")
REFERENCE = avro.schema.parse(SPANS_AVSC_TEXT)

T_F = 1_700_000_000.25
L = 0.5


def reference_read(data: bytes) -> dict[str, Any]:
    """Apache Avro's own reader, independent of fastavro, straight from the .avsc file."""
    reader = avro.io.DatumReader(REFERENCE, REFERENCE)
    record = reader.read(avro.io.BinaryDecoder(io.BytesIO(data)))
    assert isinstance(record, dict)
    return record


def test_a_sink_run_gets_latency_and_met() -> None:
    met = Span.from_run("w", ("ads", "clicks", "sink", 2, 42, 0.125, 0.0625, T_F, L, T_F + 0.25, True), 0.5)
    assert met.deadline == T_F + L
    assert met.e2e_latency_s == 0.25
    assert met.met is True
    late = Span.from_run("w", ("ads", "clicks", "sink", 2, 42, 0.0, 0.0, T_F, L, T_F + 0.75, True))
    assert late.met is False and late.e2e_latency_s == 0.75
    inner = Span.from_run("w", ("ads", "clicks", "map", 2, 42, 0.0, 0.0, T_F, L, T_F + 0.75, False))
    assert inner.e2e_latency_s is None and inner.met is None


def test_round_trip_and_reference_reader() -> None:
    span = Span.from_run(
        "worker-1", ("ads", "clicks", "sink", 3, 2**64 - 5, 0.125, 0.0625, T_F, L, T_F + 0.25, True), 0.5
    )
    data = encode_span(span)
    assert decode_span(data, SPAN_CODEC.headers()) == span
    record = reference_read(data)
    assert record["trace_id"] == -5  # the unsigned id's two's-complement form, as the schema says
    assert record["pipeline_id"] == "clicks" and record["operator_id"] == "sink"
    assert record["e2e_latency_s"] == 0.25 and record["met"] is True
    assert record["sample_ratio"] == 0.5
    # timestamp-micros: the reference reader gives datetimes; compare as epoch microseconds
    assert round(record["deadline"].timestamp() * 1e6) == round((T_F + L) * 1e6)


def test_non_sink_nulls_round_trip() -> None:
    span = Span.from_run("w", ("t", "p", "map", 0, 7, 0.001, 0.002, T_F, L, T_F + 0.1, False))
    assert decode_span(encode_span(span)) == span
    assert reference_read(encode_span(span))["met"] is None


def test_span_key_is_the_trace_id_big_endian() -> None:
    assert span_key(1) == b"\x00" * 7 + b"\x01"
    assert span_key(2**64 - 1) == b"\xff" * 8
    assert span_key(-1) == b"\xff" * 8


def test_schema_file_fingerprint_is_the_header() -> None:
    assert SPAN_CODEC.headers() == [(SCHEMA_FP_HEADER, schema_fingerprint(json.loads(SPANS_AVSC_TEXT)))]


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x00",
        b"\xff" * 40,
        None,
        encode_span(Span("p", "t", "o", "w", 0, 0, 0.0, 0.0, None, 0.0, None, 0.0)) + b"x",
    ],
)
def test_garbage_is_a_decode_error(data: bytes | None) -> None:
    with pytest.raises(DecodeError):
        decode_span(data)


def test_another_schema_is_refused() -> None:
    data = encode_span(Span("p", "t", "o", "w", 0, 0, 0.0, 0.0, None, 0.0, None, 0.0))
    with pytest.raises(DecodeError, match="another schema"):
        decode_span(data, [(SCHEMA_FP_HEADER, b"\x00" * 8)])


def test_non_finite_times_are_an_encode_error() -> None:
    with pytest.raises(EncodeError):
        encode_span(Span("p", "t", "o", "w", 0, 0, 0.0, 0.0, None, float("inf"), None, 0.0))
