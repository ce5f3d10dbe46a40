from __future__ import annotations

import re
from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cadenza.durations import parse_duration
from cadenza.pipelines import Hopping, PipelineDefinitionError, Session, Sliding, Tumbling
from cadenza.pipelines._format import format_duration
from cadenza.pipelines.window_specs import WINDOW_SPEC_ADAPTER


def test_specs_parse_human_durations_into_seconds() -> None:
    assert Tumbling("1s").size_s == 1.0
    assert Tumbling(size="250ms").size_s == 0.25
    assert Tumbling(timedelta(minutes=2)).size_s == 120.0
    assert Tumbling(0.5).size_s == 0.5
    hopping = Hopping("10s", "2s")
    assert (hopping.size_s, hopping.hop_s) == (10.0, 2.0)
    assert Hopping(size="1m", hop="1m").hop_s == 60.0
    assert Sliding("5s").size_s == 5.0
    assert Session(gap="30m").gap_s == 1800.0


def test_specs_carry_a_kind_discriminator_and_round_trip() -> None:
    specs = [Tumbling("1s"), Hopping("10s", "5s"), Sliding("2s"), Session("30s")]
    dumped = [spec.model_dump(mode="json") for spec in specs]
    assert dumped == [
        {"kind": "tumbling", "size_s": 1.0},
        {"kind": "hopping", "size_s": 10.0, "hop_s": 5.0},
        {"kind": "sliding", "size_s": 2.0},
        {"kind": "session", "gap_s": 30.0},
    ]
    assert [WINDOW_SPEC_ADAPTER.validate_python(d) for d in dumped] == specs
    assert Tumbling.model_validate_json('{"kind": "tumbling", "size_s": 3}') == Tumbling("3s")


def test_specs_are_frozen() -> None:
    spec = Tumbling("1s")
    with pytest.raises(Exception, match="frozen"):
        spec.size_s = 2.0  # type: ignore[misc]


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Tumbling("0s"), "Tumbling window: size must be greater than zero, got '0s'"),
        (lambda: Sliding(0), "Sliding window: size must be greater than zero, got 0"),
        (lambda: Session("0ms"), "Session window: gap must be greater than zero, got '0ms'"),
        (lambda: Hopping("1s", "0s"), "Hopping window: hop must be greater than zero, got '0s'"),
        (
            lambda: Hopping("1s", "2s"),
            "Hopping window: hop (2s) must not exceed size (1s); records between windows would be dropped",
        ),
        (Tumbling, "Tumbling window: size is required"),
        (lambda: Hopping("1s"), "Hopping window: hop is required"),
        (
            lambda: Tumbling("one second"),
            "Tumbling window: size: cannot parse 'one second'; write a number and a unit, e.g. '250ms', "
            "'1.5s', '2m' (units: us, ms, s, m, min, h)",
        ),
        (lambda: Session(-1), "Session window: gap: must be a finite, non-negative duration, got -1"),
        (lambda: Tumbling("1s", hop="1s"), "Tumbling window: hop: Extra inputs are not permitted"),
    ],
)
def test_invalid_specs_fail_with_clear_messages(make: object, message: str) -> None:
    assert callable(make)
    with pytest.raises(PipelineDefinitionError, match=f"^{re.escape(message)}$"):
        make()


def test_invalid_spec_read_back_from_json_is_refused_too() -> None:
    with pytest.raises(PipelineDefinitionError, match=r"hop \(2s\) must not exceed size \(1s\)"):
        WINDOW_SPEC_ADAPTER.validate_python({"kind": "hopping", "size_s": 1, "hop_s": 2})


def test_describe_uses_written_units() -> None:
    assert Tumbling("1s").describe() == "tumbling 1s"
    assert Hopping("1m", "15s").describe() == "hopping 1m every 15s"
    assert Sliding("250ms").describe() == "sliding 250ms"
    assert Session("1h").describe() == "session gap 1h"


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (0.25, "250ms"),
        (0.2, "200ms"),
        (1.5, "1.5s"),
        (90, "90s"),
        (120, "2m"),
        (7200, "2h"),
        (0.0001, "100us"),
        (1e-7, "0.1us"),
    ],
)
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


@given(st.integers(min_value=0, max_value=10**12))
def test_format_duration_reads_back(microseconds: int) -> None:
    seconds = microseconds / 1e6
    assert parse_duration(format_duration(seconds)) == pytest.approx(seconds, rel=1e-9, abs=1e-9)
