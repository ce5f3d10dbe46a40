"""Deterministic trace sampling: keep or drop a whole trace, in every worker alike.

A trace's records run at several operators, often in several workers (after a repartition), and
SnailTrail-style analysis needs all of a trace's spans or none. So the decision is a pure function of
the trace id and the ratio: every worker with the same ratio makes the same choice without talking to
the others, and at ratio r the kept traces are a subset of those kept at any larger ratio.

The hash is Fibonacci hashing, ``(trace_id * 0x9E3779B97F4A7C15) mod 2**64``, compared with
``ratio * 2**64``: one multiplication, so it is cheap enough for every record, and it spreads
sequential ids (a user's own trace ids) as evenly as random ones. Another language reproduces it
with one unsigned 64-bit multiply.
"""

from __future__ import annotations

__all__ = ["FIBONACCI_MULTIPLIER", "is_sampled", "sample_threshold", "trace_hash"]

FIBONACCI_MULTIPLIER = 0x9E3779B97F4A7C15
"""2**64 divided by the golden ratio, odd: multiplication by it is a bijection on 64-bit integers."""

_MASK = (1 << 64) - 1
_SPAN = 1 << 64


def sample_threshold(ratio: float) -> int:
    """The hash bound below which a trace is kept; ``1.0`` keeps all (``2**64``), ``0.0`` none."""
    # NaN fails the range check too.
    if isinstance(ratio, bool) or not isinstance(ratio, int | float) or not (0.0 <= ratio <= 1.0):
        raise ValueError(f"sampling ratio must be a number in [0, 1], got {ratio!r}")
    return min(_SPAN, int(ratio * _SPAN))


def trace_hash(trace_id: int) -> int:
    """The 64-bit hash sampling compares; signed and unsigned forms of the same bits agree."""
    return (trace_id * FIBONACCI_MULTIPLIER) & _MASK


def is_sampled(trace_id: int, ratio: float) -> bool:
    """Whether the trace is kept at ``ratio`` (the same answer in every worker and every run)."""
    return trace_hash(trace_id) < sample_threshold(ratio)
