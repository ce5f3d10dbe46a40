"""Durations back in the form people write them, for messages and ``cadenza describe``.

Lives apart from ``describe`` so that window specs and error messages can use it without importing the
renderer (which imports them).
"""

from __future__ import annotations


def _number(value: float) -> str:
    # Six decimals hide float noise (0.2 * 1e3 == 200.00000000000003) without losing real digits.
    return f"{value:.6f}".rstrip("0").rstrip(".")


def format_duration(seconds: float) -> str:
    """Render ``seconds`` the way a person would write it: ``250ms``, ``1.5s``, ``2m``, ``1h``.

    The result reads back through ``parse_duration`` to the same value (to nanosecond precision), so a
    described pipeline can be copied into code as is.
    """
    if seconds == 0:
        return "0s"
    for unit, scale in (("h", 3600.0), ("m", 60.0)):
        count = seconds / scale
        if count >= 1 and abs(count - round(count)) < 1e-9:
            return f"{round(count)}{unit}"
    if seconds >= 1:
        return f"{_number(seconds)}s"
    if seconds >= 1e-3:
        return f"{_number(seconds * 1e3)}ms"
    return f"{_number(seconds * 1e6)}us"
