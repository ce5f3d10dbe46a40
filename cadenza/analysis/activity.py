"""The activity record: one interval of one worker's timeline, or one message between two timelines.

Kept apart from the graph code so that the recorder in the worker and the trace decoder can build and
check activities without importing the path-counting machinery.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["KINDS", "MESSAGE", "UNKNOWN", "WAITING", "Activity"]

MESSAGE = "message"
WAITING = "waiting"
UNKNOWN = "unknown"

#: Every kind an activity may have (SnailTrail's taxonomy, plus ``message`` for cross-worker edges).
KINDS: frozenset[str] = frozenset(
    {
        "processing",
        "serialization",
        "deserialization",
        "scheduling",
        "buffer",
        "fault_tolerance",
        WAITING,
        UNKNOWN,
        MESSAGE,
    }
)


@dataclass(frozen=True, slots=True)
class Activity:
    """One edge of the program activity graph.

    A ``message`` runs from ``worker`` at ``start`` to ``to_worker`` at ``end`` (a record produced on
    one worker and fetched on another); every other kind lies on ``worker``'s own timeline. ``topic``
    names the topic a message travelled through, so that channels can be told apart in summaries.
    """

    worker: str
    start: float
    end: float
    kind: str
    operator: str | None = None
    to_worker: str | None = None
    topic: str | None = None

    @property
    def is_message(self) -> bool:
        return self.kind == MESSAGE

    @property
    def duration(self) -> float:
        return self.end - self.start

    def describe(self) -> str:
        """A short name for error messages, so that bad input can be found in a long trace."""
        where = f"{self.worker}->{self.to_worker}" if self.to_worker is not None else self.worker
        op = f" operator={self.operator!r}" if self.operator is not None else ""
        return f"{self.kind} activity on {where} [{self.start!r}, {self.end!r}]{op}"

    def check(self) -> None:
        """Raise :class:`ValueError` naming this activity if it cannot be placed in a graph."""
        if self.kind not in KINDS:
            raise ValueError(
                f"unknown kind {self.kind!r} in {self.describe()}; expected one of {sorted(KINDS)}"
            )
        if not isinstance(self.worker, str) or not self.worker:
            raise ValueError(f"{self.describe()} has no worker")
        if not (math.isfinite(self.start) and math.isfinite(self.end)):
            raise ValueError(f"{self.describe()} has a non-finite time")
        if self.end < self.start:
            what = (
                "message arrives before it is sent" if self.is_message else "activity ends before it starts"
            )
            raise ValueError(f"{what}: {self.describe()}")
        if self.is_message:
            if not self.to_worker:
                raise ValueError(f"message without to_worker: {self.describe()}")
        elif self.to_worker is not None:
            raise ValueError(f"only a message has a to_worker: {self.describe()}")
