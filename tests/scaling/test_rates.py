"""True and observed rates differenced from cumulative counters, under a VirtualClock."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cadenza.scaling import (
    InstanceRates,
    RateSample,
    SubTopologyRates,
    TrueRateMeter,
    TrueRates,
    encode_true_rates,
    parse_true_rates,
    window_rates,
)
from cadenza.scheduling.clock import VirtualClock


def test_rates_are_deltas_over_busy_and_wall_time() -> None:
    rates = window_rates(RateSample(100, 50, 1.0), RateSample(300, 450, 2.0), wall_s=4.0)
    assert rates == InstanceRates(200.0, 400.0, 50.0, 100.0)


def test_a_counter_going_back_is_a_restart() -> None:
    rates = window_rates(RateSample(100, 50, 1.0), RateSample(30, 10, 0.5), wall_s=2.0)
    assert rates == InstanceRates(60.0, 20.0, 15.0, 5.0)
    assert window_rates(None, RateSample(30, 10, 0.5), wall_s=2.0) == rates


def test_no_busy_time_gives_zero_true_rates() -> None:
    assert window_rates(RateSample(5, 5, 1.0), RateSample(5, 5, 1.0), 1.0) == InstanceRates(0.0, 0.0)


def test_a_window_must_last() -> None:
    with pytest.raises(ValueError, match="positive time"):
        window_rates(None, RateSample(1, 1, 1.0), 0.0)
    with pytest.raises(ValueError, match="window_s"):
        TrueRateMeter(VirtualClock(), dict, 0.0)


@given(
    st.lists(
        st.tuples(
            st.floats(0.1, 30.0),  # seconds until the next read
            st.integers(0, 1000),  # records processed meanwhile
            st.integers(0, 1000),  # records produced meanwhile
            st.floats(0.0, 5.0),  # busy seconds meanwhile
        ),
        min_size=1,
        max_size=30,
    ),
    st.floats(1.0, 20.0),
)
def test_meter_windows_match_a_brute_force(
    steps: list[tuple[float, int, int, float]], window_s: float
) -> None:
    clock = VirtualClock(100.0)
    totals = {"processed": 0, "produced": 0, "busy": 0.0}
    meter = TrueRateMeter(
        clock,
        lambda: {"s": RateSample(totals["processed"], totals["produced"], totals["busy"])},  # type: ignore[arg-type]
        window_s,
    )
    # (time, processed, produced, busy) when the current window opened
    opened: tuple[float, float, float, float] = (clock.now(), 0, 0, 0.0)
    expected: dict[str, InstanceRates] = {}
    for seconds, processed, produced, busy in steps:
        clock.advance(seconds)
        totals["processed"] += processed
        totals["produced"] += produced
        totals["busy"] += busy
        now: tuple[float, float, float, float] = (
            clock.now(),
            totals["processed"],
            totals["produced"],
            totals["busy"],
        )
        if now[0] - opened[0] >= window_s:
            wall = now[0] - opened[0]
            d_busy = now[3] - opened[3]
            d_proc, d_prod = now[1] - opened[1], now[2] - opened[2]
            expected = {
                "s": InstanceRates(
                    d_proc / d_busy if d_busy > 0 else 0.0,
                    d_prod / d_busy if d_busy > 0 else 0.0,
                    d_proc / wall,
                    d_prod / wall,
                )
            }
            opened = now
        got = meter.rates()
        assert got.keys() == expected.keys()
        for key, rate in expected.items():
            fields = ("true_processing", "true_output", "observed_processing", "observed_output")
            assert [getattr(got[key], f) for f in fields] == pytest.approx([getattr(rate, f) for f in fields])


def test_each_window_is_closed_once_whoever_asks() -> None:
    clock = VirtualClock(1000.0)
    totals = {"processed": 0}
    meter = TrueRateMeter(clock, lambda: {"s": RateSample(totals["processed"], 0, 1.0)}, 10.0)
    assert meter.window() is None and meter.closed == 0 and meter.closes_at == 1010.0
    clock.advance(12.0)
    totals["processed"] = 24
    first = meter.window()
    assert first is not None and (first.index, first.start, first.end) == (1, 1000.0, 1012.0)
    assert first.rates["s"].observed_processing == pytest.approx(2.0)
    # a second reader (a scrape) within the next window sees the same closed window, not a new one
    clock.advance(9.0)
    assert meter.window() is first and meter.rates() == dict(first.rates) and meter.closed == 1
    assert meter.closes_at == 1022.0
    clock.advance(1.0)
    second = meter.window()
    assert second is not None and (second.index, second.start, second.end) == (2, 1012.0, 1022.0)


def _record(*entries: SubTopologyRates) -> TrueRates:
    return TrueRates("host-7", 1764158400.0, 1764158410.5, entries)


_ONE = SubTopologyRates("acme", "clicks", "clicks.in", 5120.5, 10241.0, 812.25, 1624.5)


def test_true_rates_round_trip() -> None:
    record = _record(
        _ONE, SubTopologyRates("acme", "clicks", "clicks.2-key_by.repartition", 0.0, 0.0, 0.0, 0.0)
    )
    assert parse_true_rates(encode_true_rates(record)) == record
    assert parse_true_rates(encode_true_rates(_record())) == _record()
    assert _ONE.instance == InstanceRates(5120.5, 10241.0, 812.25, 1624.5)
    # the body is the documented JSON: a consumer needs no cadenza to read it
    document = json.loads(encode_true_rates(_record(_ONE)))
    assert document["worker"] == "host-7" and document["window_end"] == 1764158410.5
    assert document["rates"] == [
        {
            "tenant": "acme",
            "pipeline": "clicks",
            "sub_topology": "clicks.in",
            "true_processing": 5120.5,
            "true_output": 10241.0,
            "observed_processing": 812.25,
            "observed_output": 1624.5,
        }
    ]


finite = st.floats(0.0, 1e12, allow_nan=False, allow_infinity=False)
label = st.text(min_size=1, max_size=20)


@given(
    label,
    finite,
    finite,
    st.lists(st.tuples(label, label, label, finite, finite, finite, finite), max_size=5),
)
def test_any_valid_record_survives_the_round_trip(
    worker: str, start: float, length: float, entries: list[tuple[str, str, str, float, float, float, float]]
) -> None:
    record = TrueRates(worker, start, start + length, tuple(SubTopologyRates(*e) for e in entries))
    assert parse_true_rates(encode_true_rates(record)) == record


def _body(**changes: object) -> bytes:
    document = json.loads(encode_true_rates(_record(_ONE)))
    document.update(changes)
    return json.dumps(document).encode()


def _entry_body(**changes: object) -> bytes:
    document = json.loads(encode_true_rates(_record(_ONE)))
    document["rates"][0].update(changes)
    return json.dumps(document).encode()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (b"", "empty value"),
        (None, "empty value"),
        (b"\x02avro", "not JSON"),
        (b"\xff\xfe", "not JSON"),
        (b"[1, 2]", "expected a JSON object, got list"),
        (_body(worker=""), "'worker' must be a non-empty string"),
        (_body(worker=7), "'worker' must be a non-empty string"),
        (_body(window_start="soon"), "'window_start' must be a finite number"),
        (_body(window_end=True), "'window_end' must be a finite number"),
        (_body(window_end=1.0), "window_end 1.0 is before window_start"),
        (
            b'{"worker": "w", "window_start": NaN, "window_end": 1, "rates": []}',
            "'window_start' must be a finite",
        ),
        (_body(rates={"a": 1}), "'rates' must be a list, got dict"),
        (_body(rates=None), "'rates' must be a list, got NoneType"),
        (_body(rates=[3]), r"rates\[0\]: expected a JSON object, got int"),
        (_entry_body(tenant=None), r"rates\[0\]: 'tenant' must be a non-empty string"),
        (_entry_body(sub_topology=""), r"rates\[0\]: 'sub_topology' must be a non-empty string"),
        (_entry_body(true_processing=-1.0), r"rates\[0\]: 'true_processing' must not be negative"),
        (_entry_body(observed_output="1"), r"rates\[0\]: 'observed_output' must be a finite number"),
        (
            b'{"worker": "w", "window_start": 0, "window_end": 1, "rates": [{"tenant": "t", "pipeline": "p", '
            b'"sub_topology": "s", "true_processing": Infinity, "true_output": 0, "observed_processing": 0, '
            b'"observed_output": 0}]}',
            r"'true_processing' must be a finite number",
        ),
    ],
)
def test_bad_true_rates_raise_a_clear_value_error(value: bytes | None, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_true_rates(value)


def test_unknown_fields_are_ignored_and_a_rate_that_is_not_finite_is_never_written() -> None:
    assert parse_true_rates(_body(version=2)) == _record(_ONE)
    assert parse_true_rates(_entry_body(note="x")) == _record(_ONE)
    broken = SubTopologyRates("acme", "clicks", "clicks.in", float("inf"), 0.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="JSON compliant"):
        encode_true_rates(_record(broken))
