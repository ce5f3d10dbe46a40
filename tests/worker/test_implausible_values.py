"""Issue 15: event times a context cannot carry are refused with the likely cause, and NaN or infinity
never reach a JSON sink as the non-JSON tokens ``NaN``/``Infinity``."""

from __future__ import annotations

import json
import math
import time
from typing import Any

import pytest

from cadenza.operators import Window
from cadenza.schemas import codec_for
from cadenza.worker.engine.decode import EVENT_TIME_MAX_AHEAD, event_time_seconds, plausible_event_time
from cadenza.worker.engine.wire import encode_window_result


def strict_json(data: bytes) -> Any:
    def refuse(token: str) -> Any:
        raise ValueError(f"not JSON: {token}")

    return json.loads(data, parse_constant=refuse)


@pytest.mark.parametrize("factor", [1000.0, 1e6])
def test_event_times_in_milliseconds_or_microseconds_are_refused_with_the_likely_cause(factor: float) -> None:
    with pytest.raises(ValueError, match="did you send milliseconds"):
        event_time_seconds(time.time() * factor)


def test_event_times_near_the_wall_clock_and_in_the_past_are_kept() -> None:
    now = time.time()
    for seconds in (0.0, 1.5, now - 86400 * 365 * 30, now, now + EVENT_TIME_MAX_AHEAD - 60):
        assert plausible_event_time(seconds) == seconds


def test_event_times_beyond_what_a_context_carries_are_refused_in_both_directions() -> None:
    with pytest.raises(ValueError, match="2\\*\\*52"):
        plausible_event_time(-(2**52) / 1e6 - 1)
    with pytest.raises(ValueError, match="more than a year ahead"):
        plausible_event_time(time.time() + EVENT_TIME_MAX_AHEAD + 3600)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_nan_and_infinity_reach_a_json_sink_as_null(bad: float) -> None:
    encoded = codec_for("json").encode({"score": bad, "ok": 1.5})
    assert strict_json(encoded) == {"score": None, "ok": 1.5}
    window = encode_window_result("k", Window(0.0, 1.0), bad)
    assert strict_json(window)["value"] is None
