"""Human-friendly durations ("250ms", "1.5s", "2m") used by the DSL, settings and the CLI.

Latency targets and window sizes are written by people, so they are parsed from strings; inside
cadenza every duration is a float number of seconds, which is what the clocks return.
"""

from __future__ import annotations

import math
import re
from datetime import timedelta

_UNITS: dict[str, float] = {
    "us": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "min": 60.0,
    "h": 3600.0,
}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?|\.\d+)\s*(us|ms|s|min|m|h)\s*$")


def parse_duration(value: str | float | timedelta, *, what: str = "duration") -> float:
    """Return ``value`` in seconds; raise ``ValueError`` naming ``what`` if it cannot be read.

    Bare numbers are taken as seconds. Negative, infinite and NaN durations are refused because no
    window, target or timeout can use them.
    """
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, bool):
        raise ValueError(f"{what}: expected a duration such as '250ms' or '1s', got {value!r}")
    elif isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        match = _PATTERN.match(value)
        if match is None:
            raise ValueError(
                f"{what}: cannot parse {value!r}; write a number and a unit, e.g. '250ms', '1.5s', "
                f"'2m' (units: {', '.join(_UNITS)})"
            )
        seconds = float(match.group(1)) * _UNITS[match.group(2)]
    else:
        raise ValueError(f"{what}: expected a duration such as '250ms' or '1s', got {value!r}")
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"{what}: must be a finite, non-negative duration, got {value!r}")
    return seconds
