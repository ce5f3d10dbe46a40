"""The hand-written span encoder writes exactly what fastavro writes from spans.avsc."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cadenza.infra.metrics.span_writer import SPANS_AVSC_FINGERPRINT, SpanWriter, _varint
from cadenza.infra.metrics.spans import SPAN_CODEC, Span, decode_span, encode_span
from cadenza.schemas import EncodeError

ids = st.text(max_size=40)
seconds = st.floats(min_value=-1e9, max_value=4e9, allow_nan=False)
durations = st.floats(allow_nan=True, allow_infinity=True)


def test_the_schema_is_the_one_the_writer_was_written_for() -> None:
    assert SPAN_CODEC.fingerprint.hex() == SPANS_AVSC_FINGERPRINT, (
        "spans.avsc changed: update SpanWriter (cadenza/infra/metrics/span_writer.py) to the new "
        "fields, then SPANS_AVSC_FINGERPRINT"
    )


@settings(max_examples=400, deadline=None)
@given(
    worker=ids,
    tenant=ids,
    pipeline=ids,
    operator=ids,
    partition=st.integers(min_value=-(2**31), max_value=2**31 - 1),
    trace=st.integers(min_value=0, max_value=2**64 - 1),
    queue_wait=durations,
    run_time=durations,
    frontier=seconds,
    latency=st.floats(min_value=0, max_value=1e6),
    at=seconds,
    sink=st.booleans(),
    ratio=st.floats(min_value=0.0, max_value=1.0),
)
def test_same_bytes_as_fastavro(
    *,
    worker: str,
    tenant: str,
    pipeline: str,
    operator: str,
    partition: int,
    trace: int,
    queue_wait: float,
    run_time: float,
    frontier: float,
    latency: float,
    at: float,
    sink: bool,
    ratio: float,
) -> None:
    writer = SpanWriter(worker, ratio)
    args = (tenant, pipeline, operator, partition, trace, queue_wait, run_time, frontier, latency, at, sink)
    data = writer.encode_run(args)
    span = Span.from_run(worker, args, ratio)
    assert data == encode_span(span)
    assert writer.encode_run(args) == data  # the cached prefix gives the same bytes
    decoded = decode_span(data)
    assert (decoded.trace_id, decoded.partition, decoded.met) == (trace, partition, span.met)


@pytest.mark.parametrize("value", [0, 1, 127, 128, 16383, 16384, 2**35, 2**56 - 1, 2**56, 2**63, 2**64 - 1])
def test_varint_edges(value: int) -> None:
    expected = bytearray()
    rest = value
    while rest >= 0x80:
        expected.append((rest & 0x7F) | 0x80)
        rest >>= 7
    expected.append(rest)
    assert _varint(value) == bytes(expected)


@pytest.mark.parametrize(
    ("frontier", "at", "partition"),
    [(float("inf"), 1.0, 0), (1.0, float("nan"), 0), (1e300, 1.0, 0), (1.0, 1.0, 2**31)],
)
def test_unencodable_runs_raise_encode_error(frontier: float, at: float, partition: int) -> None:
    with pytest.raises(EncodeError):
        SpanWriter("w", 1.0).encode_run(("t", "p", "o", partition, 1, 0.0, 0.0, frontier, 0.5, at, True))


def test_unencodable_ids_raise_encode_error() -> None:
    with pytest.raises(EncodeError):
        SpanWriter("w", 1.0).encode_run(("\ud800", "p", "o", 0, 1, 0.0, 0.0, 1.0, 0.5, 1.0, False))
