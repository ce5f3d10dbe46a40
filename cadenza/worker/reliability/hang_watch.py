"""The hang watchdog's pure parts: when a running user call counts as hung or dead, and which call runs.

A record can kill its worker without crashing it: a user call that never returns holds the worker
past ``max.poll.interval.ms``, and the group declares its partitions lost. The watchdog (a thread of
:class:`~cadenza.worker.reliability.quarantine.QuarantineGuard`) makes that a death of the record like
any other: it pins the record with a marker past ``hang_timeout``, clears the marker if the call
returns in time, and fails the worker (:class:`HungRecordError`) once the poll interval is past.
:class:`HangTracker` makes those decisions from what the thread observes, on the caller's clock, so
they are tested without threads or sleeping.

The watchdog finds the running record of the normal path without any per-record bookkeeping: it
reads the locals ``unit``, ``started`` and ``finished`` of the worker's quantum loop (the code object
given to :meth:`~cadenza.worker.reliability.quarantine.QuarantineGuard.watch`) in the worker thread's
frame (:func:`running_unit`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from types import CodeType, FrameType

from cadenza.infra.kafka.errors import KafkaClientError
from cadenza.worker.reliability.quarantine_marks import Key

__all__ = ["HangEvent", "HangTracker", "HungRecordError", "running_unit"]


class HungRecordError(KafkaClientError):
    """A user call ran past ``max.poll.interval.ms``: the group has declared the partitions lost.

    A :class:`KafkaClientError` so that the supervisor starts a fresh worker in place.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message, code="_MAX_POLL_EXCEEDED", retriable=True)


class HangEvent(Enum):
    PIN = "pin"  # past hang_timeout
    DEAD = "dead"  # past the poll interval
    RETURNED = "returned"  # a pinned call returned before the poll interval


@dataclass
class HangTracker:
    """The watchdog's decisions from what it observes, on the caller's clock (pure)."""

    hang_timeout: float
    poll_interval: float
    current: tuple[Key, int, float] | None = None
    pinned: bool = False
    dead: bool = False

    def observe(self, now: float, running: tuple[Key, int, float] | None) -> list[HangEvent]:
        """``running``: (partition, offset, start) of the user call running now, or ``None``."""
        events: list[HangEvent] = []
        if running != self.current:
            if self.pinned and not self.dead:
                events.append(HangEvent.RETURNED)
            self.current, self.pinned, self.dead = running, False, False
        if running is None:
            return events
        elapsed = now - running[2]
        if elapsed >= self.hang_timeout and not self.pinned:
            self.pinned = True
            events.append(HangEvent.PIN)
        if elapsed >= self.poll_interval and not self.dead:
            self.dead = True
            events.append(HangEvent.DEAD)
        return events


def running_unit(frame: FrameType | None, code: CodeType) -> tuple[Key, int, float] | None:
    """(partition, offset, start) of the record a quantum loop runs, from the worker thread's frame."""
    while frame is not None and frame.f_code is not code:
        frame = frame.f_back
    if frame is None:
        return None
    local = frame.f_locals
    unit, started, finished = local.get("unit"), local.get("started"), local.get("finished")
    if unit is None or not isinstance(started, float):
        return None
    if isinstance(finished, float) and finished >= started:
        return None  # between two records
    return (unit.topic, unit.partition), unit.offset, started
