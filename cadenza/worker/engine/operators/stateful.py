"""What the worker needs from a stateful step (restore on assignment, drop on revocation, changelog
writes), and the code window, join and process steps share to provide it.

Window aggregates (:class:`~cadenza.worker.engine.operators.window_step.WindowOp`), process steps
(:class:`~cadenza.worker.engine.operators.process_step.ProcessOp`) and both inputs of a join
(:class:`~cadenza.worker.engine.operators.join_step.JoinInput`) satisfy :class:`StatefulStep`, so
the runtime and
the restorer handle them alike: per (step, input partition), whatever the step is. All three steps
derive from :class:`StatefulOperator` and take its arguments as one :class:`StatefulArgs`: a store
split by input partition, one changelog view and one watermark tracker per partition, the restore
sequence (drop, open over the restored entries, resume at the changelog position; a step says how it
opens a partition and what else its position restores), the skipping of replayed input, and the
changelog writes of the partitions a batch touched.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Hashable, Iterable
from typing import Any, NotRequired, Protocol, TypedDict

from cadenza.operators import WatermarkTracker
from cadenza.state import ChangelogView, ChangelogWrite, InMemoryStateStore, Position, StateStore
from cadenza.worker.engine.counters import WorkerCounters
from cadenza.worker.engine.dead_letter import DeadLetters
from cadenza.worker.engine.operators.base import Operator
from cadenza.worker.engine.unit import Unit

__all__ = ["StatefulArgs", "StatefulOperator", "StatefulStep"]

_log = logging.getLogger("cadenza.worker")
_NEG_INF = float("-inf")


class StatefulStep(Protocol):
    @property
    def node_id(self) -> str:
        """The step's id in the compiled graph (for messages)."""
        ...

    @property
    def changelog_topic(self) -> str:
        """Partition ``p`` of this topic holds the state of input partition ``p``."""
        ...

    @property
    def touched(self) -> Collection[int]:
        """Partitions changed since the last :meth:`changelog_writes` (empty: nothing to write)."""
        ...

    def restore(self, partition: int, entries: dict[Any, Any], position: Position | None) -> None:
        """Start ``partition`` from restored state (or empty, when ``position`` is None)."""
        ...

    def drop(self, partition: int) -> None:
        """Forget a revoked or lost partition."""
        ...

    def changelog_writes(self) -> list[tuple[int, list[ChangelogWrite]]]:
        """Per touched partition, its changed keys and then its position marker; clears ``touched``."""
        ...

    def progress(self, unit: Unit, source: int, event_time: float) -> None:
        """Apply a progress record (``unit``): upstream partition ``source`` got to ``event_time``."""
        ...

    @property
    def idle_timeouts(self) -> int:
        """How many times the idle timeout of one of the step's watermark inputs fired."""
        ...


class StatefulArgs(TypedDict):
    """The keyword arguments of :class:`StatefulOperator`, which every step deriving from it takes
    (``**common: Unpack[StatefulArgs]``) and passes on as they are; the task builder makes them once
    for all stateful kinds."""

    max_out_of_orderness: float
    changelog_topic: str
    next: Operator
    dead: DeadLetters
    counters: WorkerCounters
    store: NotRequired[StateStore | None]
    idle_timeout: NotRequired[float | None]
    clock: NotRequired[Callable[[], float]]
    records_progress: NotRequired[bool]


class StatefulOperator(Operator):
    """State, watermarks and changelog writes per input partition; subclasses keep, per partition, an
    object with a ``view`` (:class:`~cadenza.state.ChangelogView`) and say what its position is."""

    __slots__ = (
        "changelog_topic",
        "clock",
        "counters",
        "dead",
        "idle_logged",
        "idle_timeout",
        "idle_timeouts",
        "max_out_of_orderness",
        "next",
        "partitions",
        "records_progress",
        "store",
        "touched",
    )

    def __init__(
        self,
        node_id: str,
        *,
        max_out_of_orderness: float,
        changelog_topic: str,
        next: Operator,
        dead: DeadLetters,
        counters: WorkerCounters,
        store: StateStore | None = None,
        idle_timeout: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        records_progress: bool = True,
    ) -> None:
        super().__init__(node_id)
        #: What idle timeouts are measured on (seconds; a test driver passes its virtual clock).
        self.clock = clock
        #: Whether a record's event time says how far its watermark input got. Not behind a key_by
        #: that reads a repartition topic: an input partition there interleaves the records of many
        #: upstream partitions, so only its progress records (its frontier) say how far it got.
        self.records_progress = records_progress
        self.max_out_of_orderness = max_out_of_orderness
        self.changelog_topic = changelog_topic
        self.next = next
        self.dead = dead
        self.counters = counters
        self.store: StateStore = store if store is not None else InMemoryStateStore()
        self.idle_timeout = idle_timeout
        #: How many times an input's idle timeout fired (the ``cadenza_watermark_idle_timeouts`` metric).
        self.idle_timeouts = 0
        #: (partition, input) pairs whose idle timeout was logged: once each, not once per silence.
        self.idle_logged: set[tuple[int, Hashable]] = set()
        self.partitions: dict[int, Any] = {}
        #: Partitions that ran records since the last changelog write.
        self.touched: set[int] = set()

    # -- partitions: open, restore, drop ---------------------------------------------------------------

    def _open(self, partition: int, entries: dict[Any, Any] | None = None) -> Any:
        """Make and keep ``partition``'s object over its view of the store (holding ``entries``)."""
        raise NotImplementedError

    def _part(self, partition: int) -> Any:
        """``partition``'s object, opened empty when it has none yet (its first record)."""
        part = self.partitions.get(partition)
        return part if part is not None else self._open(partition)

    def restore(self, partition: int, entries: dict[Any, Any], position: Position | None) -> None:
        """Start ``partition`` from restored state (or empty, when ``position`` is None)."""
        self.drop(partition)
        self._reopen(partition, entries, position)

    def _reopen(self, partition: int, entries: dict[Any, Any], position: Position | None) -> Any:
        """Open ``partition`` over ``entries`` and, when there is a ``position``, take it up there."""
        part = self._open(partition, entries)
        if position is not None:
            self._resume(part, position)
        return part

    def drop(self, partition: int) -> None:
        """Forget a revoked or lost partition."""
        self._forget(partition)

    def _view(self, partition: int, entries: dict[Any, Any] | None) -> ChangelogView:
        view = ChangelogView(self.store, partition)
        if entries:
            view.load(entries)
        return view

    def _tracker(self, partition: int, inputs: Iterable[Hashable]) -> WatermarkTracker:
        return WatermarkTracker(
            inputs,
            max_out_of_orderness=self.max_out_of_orderness,
            idle_timeout=self.idle_timeout,
            clock=self.clock,
            on_idle=lambda source: self._idle(partition, source),
        )

    def _idle(self, partition: int, source: Hashable) -> None:
        self.idle_timeouts += 1
        if (partition, source) not in self.idle_logged:
            self.idle_logged.add((partition, source))
            _log.warning(
                "step %r, partition %d: watermark input %s delivered nothing for %ss (idle timeout); it "
                "no longer holds the watermark back, so its later records may be late",
                self.node_id,
                partition,
                source,
                self.idle_timeout,
            )

    def _forget(self, partition: int) -> None:
        self.partitions.pop(partition, None)
        self.store.drop(partition)
        self.touched.discard(partition)

    # The record bookkeeping window and process steps share; ``part`` has ``skip_below``, ``origins``,
    # ``current``, ``tracker``, ``event_times`` and ``next_offset``.

    def _resume(self, part: Any, position: Position) -> None:
        """Take up a restored partition where its changelog position says it stood (a step extends
        this with what else its position restores)."""
        part.skip_below = position.offset
        part.origins = dict(position.origins)
        part.event_times = dict(position.event_times)
        for source, event_time in position.event_times.items():
            part.tracker.observe(source, event_time)

    def _fresh(self, part: Any, unit: Unit) -> bool:
        """Whether ``unit`` is new to ``part``'s state: not below its restored position and, read from a
        repartition topic, not a copy of a record an upstream wrote twice (what is skipped is counted)."""
        origin = unit.origin
        if unit.offset < part.skip_below:
            self.counters.replay_skipped += 1
            part.tracker.heard(0 if origin is None else origin[0])
            return False
        if origin is not None and unit is not part.current:
            part.current = unit
            mark = (origin[1], origin[2])
            seen = part.origins.get(origin[0])
            if seen is not None and mark <= seen:
                part.current = None  # every value of this unit is a copy
                self.counters.replay_skipped += 1
                part.tracker.heard(origin[0])
                return False
            part.origins[origin[0]] = mark
        return True

    def _fresh_progress(self, part: Any, unit: Unit, source: int) -> bool:
        """Whether progress record ``unit`` from upstream ``source`` is new to ``part``'s state."""
        if unit.offset < part.skip_below:
            part.tracker.heard(source)
            return False
        part.current = None
        return True

    def _observed(
        self, part: Any, partition: int, source: int, event_time: float, offset: int, *, record: bool = False
    ) -> None:
        """Account input ``offset`` from watermark input ``source`` at ``event_time`` (a ``record``'s or a
        progress record's) in the watermark and the changelog position."""
        part.next_offset = offset + 1
        self.touched.add(partition)
        if record and not self.records_progress:
            part.tracker.heard(source)
            return
        part.tracker.observe(source, event_time)
        event_times = part.event_times
        if event_time > event_times.get(source, _NEG_INF):
            event_times[source] = event_time

    def _position(self, part: Any) -> Position:
        """Where partition ``part``'s state stands, for its changelog marker."""
        raise NotImplementedError

    def changelog_writes(self) -> list[tuple[int, list[ChangelogWrite]]]:
        """Per touched partition, its changed keys and then its position marker; clears ``touched``."""
        writes: list[tuple[int, list[ChangelogWrite]]] = []
        for partition in sorted(self.touched):
            part = self.partitions.get(partition)
            if part is not None:
                writes.append((partition, part.view.drain(self._position(part))))
        self.touched.clear()
        return writes
