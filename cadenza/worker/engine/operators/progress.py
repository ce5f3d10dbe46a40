"""Progress at a sub-topology's entry: progress records bypass the steps, and every record counts.

:class:`ProgressGate`, the entry of a sub-topology that reads a repartition topic: a progress
record (see :mod:`cadenza.worker.engine.wire`) carries no value, only how far an upstream partition got.
It must reach the stateful steps (windows, join inputs) in offset order with the records, so it is
queued and run like one, but it must not meet a user function on the way: the gate hands it
straight to every stateful step of the task and passes records on unchanged. When the task has
steps on lessees, records before it may still be there: it then waits at the gate (a
:class:`~cadenza.worker.engine.operators.parallel_step.ProgressHold`) until they are released, and
the records after it wait until it is delivered, so the stateful steps see the same order.

:class:`ProgressTap`: a key_by reached from the entry through stateless steps only (map, filter,
flat_map, branch) is handed records with the event time they entered with, so how far its input
partition got is known at the entry, from every record run there: also from those a filter or a
branch drops, or a user function dead-letters, before the key_by. Without this, a source partition
whose records a filter drops for a while would send no progress, and every window downstream would
wait for it until the idle timeout, after which its next record passing the filter could be late.
A record only claims how far its own input partition got, which the watermark rule allows (see
``docs/concepts/watermarks.md``: the bound on disorder is per source partition, filtered records included).

:class:`FrontierTap`: the same for a sub-topology that reads a repartition topic (a ``key_by``
after a ``key_by``). There a record does *not* say how far its input partition got: a repartition
partition interleaves the records of every upstream partition as their workers happen to deliver
them, so the largest event time seen on it is only how far the fastest upstream partition got, and
the records of a slower one still to come would be late in the windows downstream. What the input
partition can vouch for is its *frontier*: the minimum, over its upstream partitions (known from
the plan), of the largest event time each has delivered there, by records or progress records.
That is a window's watermark before ``max_out_of_orderness`` is taken off (the window downstream
takes it off again, which the bound on disorder per source partition allows), and it follows the
same rules: an upstream partition that has delivered nothing holds it back, until the idle timeout.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Callable, Hashable, Sequence
from typing import Any, Protocol

from cadenza.operators import WatermarkTracker, Window
from cadenza.worker.engine.operators.base import Operator
from cadenza.worker.engine.operators.parallel_step import ProgressHold
from cadenza.worker.engine.operators.routing import KeyByOp
from cadenza.worker.engine.unit import Unit

__all__ = ["FrontierTap", "ProgressGate", "ProgressListener", "ProgressTap"]

_log = logging.getLogger("cadenza.worker")


class ProgressListener(Protocol):
    def progress(self, unit: Unit, source: int, event_time: float) -> None:
        """Apply a progress record (``unit``): upstream partition ``source`` got to ``event_time``."""
        ...


class ProgressGate(Operator):
    """Hands progress records to the stateful steps, records on; with ``hold`` (the task has steps on
    lessees), a progress record waits there until every record before it has been released."""

    __slots__ = ("hold", "next", "steps")

    def __init__(
        self,
        node_id: str,
        next: Operator,
        steps: Sequence[ProgressListener],
        *,
        hold: ProgressHold | None = None,
    ) -> None:
        super().__init__(node_id)
        self.next = next
        self.steps = tuple(steps)
        self.hold = hold

    def process(self, unit: Unit, key: Any, value: Any, event_time: float, window: Window | None) -> None:
        origin = unit.origin
        if origin is not None and origin[1] < 0:
            hold = self.hold
            if hold is not None and hold.busy(unit):
                hold.defer(unit, functools.partial(self._deliver, unit, origin[0], event_time))
                return
            self._deliver(unit, origin[0], event_time)
            return
        self.next.process(unit, key, value, event_time, window)

    def _deliver(self, unit: Unit, source: int, event_time: float) -> None:
        for step in self.steps:
            step.progress(unit, source, event_time)


class ProgressTap(Operator):
    __slots__ = ("keyed", "next")

    def __init__(self, node_id: str, next: Operator, keyed: Sequence[KeyByOp]) -> None:
        super().__init__(node_id)
        self.next = next
        self.keyed = tuple(keyed)

    def process(self, unit: Unit, key: Any, value: Any, event_time: float, window: Window | None) -> None:
        partition = unit.partition
        for step in self.keyed:
            step.advance(partition, event_time)
        self.next.process(unit, key, value, event_time, window)


class FrontierTap(Operator):
    """Hands each key_by the frontier of its input partition (see the module docstring); it also
    takes the progress records (through the :class:`ProgressGate` in front of it).

    ``sources``: the upstream partitions of the topic read, from the plan (``None``: not known, and
    the frontier is the minimum over those heard from so far). The idle timeout runs on ``clock``,
    the worker's idle clock, like the windows' (``docs/concepts/watermarks.md``, rule 5); each firing is
    counted in :attr:`idle_timeouts` and logged once per partition and upstream partition.
    """

    __slots__ = (
        "_trackers",
        "clock",
        "idle_logged",
        "idle_timeout",
        "idle_timeouts",
        "keyed",
        "next",
        "sources",
    )

    def __init__(
        self,
        node_id: str,
        next: Operator,
        keyed: Sequence[KeyByOp],
        *,
        sources: tuple[int, ...] | None,
        idle_timeout: float | None,
        clock: Callable[[], float],
    ) -> None:
        super().__init__(node_id)
        self.next = next
        self.keyed = tuple(keyed)
        self.sources = sources
        self.idle_timeout = idle_timeout
        self.clock = clock
        self.idle_timeouts = 0
        self.idle_logged: set[tuple[int, Hashable]] = set()
        #: Per input partition: how far each of its upstream partitions got there. Kept across a
        #: revocation: what it says stays true (event times only grow), and replays are duplicates.
        self._trackers: dict[int, WatermarkTracker] = {}

    def process(self, unit: Unit, key: Any, value: Any, event_time: float, window: Window | None) -> None:
        origin = unit.origin
        if origin is not None:
            self._advance(unit.partition, origin[0], event_time)
        self.next.process(unit, key, value, event_time, window)

    def progress(self, unit: Unit, source: int, event_time: float) -> None:
        self._advance(unit.partition, source, event_time)

    def _advance(self, partition: int, upstream: int, event_time: float) -> None:
        tracker = self._trackers.get(partition)
        if tracker is None:
            tracker = self._trackers[partition] = WatermarkTracker(
                self.sources or (),
                idle_timeout=self.idle_timeout,
                clock=self.clock,
                on_idle=lambda source: self._idle(partition, source),
            )
        tracker.observe(upstream, event_time)
        frontier = tracker.watermark()
        if frontier > -math.inf:
            for step in self.keyed:
                step.advance(partition, frontier)

    def _idle(self, partition: int, source: Hashable) -> None:
        self.idle_timeouts += 1
        if (partition, source) not in self.idle_logged:
            self.idle_logged.add((partition, source))
            _log.warning(
                "step %r, partition %d: upstream partition %s delivered nothing for %ss (idle timeout); it "
                "no longer holds back the progress of the key_by downstream, so its later records may be "
                "late there",
                self.node_id,
                partition,
                source,
                self.idle_timeout,
            )
