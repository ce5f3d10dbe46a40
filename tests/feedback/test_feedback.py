"""The feedback record: Avro round trip, the schema file as contract, and the statistic choice."""

from __future__ import annotations

import dataclasses
import io
from importlib.resources import files

import avro.io
import avro.schema
import pytest

from cadenza.feedback.consumer import RunTimeStatistic, run_time_statistic
from cadenza.feedback.records import (
    FEEDBACK_CODEC,
    FeedbackRecord,
    decode_feedback,
    encode_feedback,
    feedback_key,
)
from cadenza.schemas import SCHEMA_FP_HEADER, DecodeError, EncodeError

REFERENCE = avro.schema.parse(files("cadenza.schemas").joinpath("feedback.avsc").read_text(encoding="utf-8"))


def stats(**changes: object) -> FeedbackRecord:
    record = FeedbackRecord(
        pipeline_id="clicks",
        operator_id="count",
        tenant_id="ads",
        window_start=1_700_000_000.0,
        window_end=1_700_000_010.0,
        count=1200,
        run_time_p50=0.001,
        run_time_p95=0.004,
        run_time_p99=0.009,
        queue_wait_p50=0.01,
        queue_wait_p95=0.05,
        queue_wait_p99=0.2,
        true_processing_rate=500.0,
        produced_at=1_700_000_011.5,
    )
    return dataclasses.replace(record, **changes)  # type: ignore[arg-type]


def test_round_trip_with_and_without_sink_statistics() -> None:
    inner = stats()
    assert decode_feedback(encode_feedback(inner), FEEDBACK_CODEC.headers()) == inner
    sink = stats(e2e_p50=0.02, e2e_p95=0.08, e2e_p99=0.3, deadline_miss_ratio=0.125)
    assert decode_feedback(encode_feedback(sink)) == sink


def test_the_reference_reader_reads_what_encode_feedback_writes() -> None:
    data = encode_feedback(stats(deadline_miss_ratio=0.25))
    record = avro.io.DatumReader(REFERENCE, REFERENCE).read(avro.io.BinaryDecoder(io.BytesIO(data)))
    assert isinstance(record, dict)
    assert record["count"] == 1200 and record["true_processing_rate"] == 500.0
    assert record["deadline_miss_ratio"] == 0.25 and record["e2e_p50"] is None
    assert round(record["window_end"].timestamp()) == 1_700_000_010


def test_key_names_the_operator() -> None:
    assert stats().key == feedback_key("clicks", "count", "ads") == b"clicks\x00count\x00ads"


@pytest.mark.parametrize(
    ("statistic", "expected"),
    [("mean", 1 / 500.0), ("p50", 0.001), ("p95", 0.004), ("p99", 0.009)],
)
def test_statistics(statistic: str, expected: float) -> None:
    assert run_time_statistic(stats(), statistic) == expected


@pytest.mark.parametrize(
    ("changes", "statistic"),
    [
        ({"true_processing_rate": 0.0}, RunTimeStatistic.MEAN),
        ({"true_processing_rate": -3.0}, RunTimeStatistic.MEAN),
        ({"true_processing_rate": float("nan")}, RunTimeStatistic.MEAN),
        ({"true_processing_rate": float("inf")}, RunTimeStatistic.MEAN),
        ({"run_time_p95": float("nan")}, RunTimeStatistic.P95),
        ({"run_time_p95": -0.001}, RunTimeStatistic.P95),
    ],
)
def test_unusable_statistics_give_none(changes: dict[str, float], statistic: RunTimeStatistic) -> None:
    assert run_time_statistic(stats(**changes), statistic) is None


def test_unknown_statistic_is_refused() -> None:
    with pytest.raises(ValueError):
        run_time_statistic(stats(), "p42")


@pytest.mark.parametrize("data", [b"", b"\x02abc", b"\xff" * 100, None, encode_feedback(stats()) + b"\x00"])
def test_malformed_bytes_are_a_decode_error(data: bytes | None) -> None:
    with pytest.raises(DecodeError):
        decode_feedback(data)


def test_another_schema_is_refused() -> None:
    with pytest.raises(DecodeError, match="another schema"):
        decode_feedback(encode_feedback(stats()), [(SCHEMA_FP_HEADER, b"\x01" * 8)])


def test_non_finite_window_is_an_encode_error() -> None:
    with pytest.raises(EncodeError):
        encode_feedback(stats(window_end=float("nan")))
