"""What a lessee runs: one step's function over a batch of values, each call timed and caught.

The same function runs in a thread lessee and in a process lessee, so a step's outcome does not
depend on where it ran. A call's failure is its outcome (the lessor dead-letters the record, as a
plain step does), never the batch's. While a call runs, ``progress`` holds which one and since when
(monotonic seconds, the same clock in every process of the host): that is how the lessor sees a call
past its ``timeout`` without the lessee telling it anything per record.
"""

from __future__ import annotations

import time
from collections.abc import Callable, MutableSequence, Sequence
from typing import Any

__all__ = ["FILTER", "FLAT_MAP", "LIFT", "MAP", "Outcome", "run_batch"]

MAP = 0
FILTER = 1
FLAT_MAP = 2
#: A window aggregate's lift (``add(init(), value)``): run like a map, released as a ``Lifted``.
LIFT = 3
KINDS = {"map": MAP, "filter": FILTER, "flat_map": FLAT_MAP, "lift": LIFT}

Outcome = tuple[bool, Any]
"""``(True, what the call returned)`` (a map's value, a filter's verdict, a flat_map's list), or
``(False, the exception it raised)``."""


def run_batch(
    kind: int, fn: Callable[[Any], Any], values: Sequence[Any], progress: MutableSequence[float]
) -> tuple[list[Outcome], float]:
    """Run ``fn`` on each value; the outcomes in order, and the seconds the calls took in all.

    ``progress[0]`` is the index of the call running and ``progress[1]`` when it started (0.0:
    none); the start is cleared before the index moves, so a reader that sees the same start twice
    around reading the index has a consistent pair."""
    outcomes: list[Outcome] = []
    append = outcomes.append
    clock = time.monotonic
    began = clock()
    for index, value in enumerate(values):
        progress[1] = 0.0
        progress[0] = float(index)
        progress[1] = clock()
        try:
            if kind == FILTER:
                append((True, bool(fn(value))))
            elif kind == FLAT_MAP:
                append((True, list(fn(value))))
            else:
                append((True, fn(value)))
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # the user's code: its failure is the record's outcome
            append((False, exc))
    progress[1] = 0.0
    return outcomes, clock() - began
