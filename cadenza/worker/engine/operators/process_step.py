"""The process step: a user :class:`~cadenza.pipelines.Processor` with keyed state and timers.

It is a stateful step like a window (:class:`~cadenza.worker.engine.operators.stateful.StatefulOperator`):
per input partition a :class:`~cadenza.state.ChangelogView` of the step's store, a watermark tracker
and a changelog position, restored on assignment and changelogged after each batch by the same
worker code. Each key's entry in the store is ``[state, event timers, wall-clock timers]``, so timers
are state too: they reach the changelog with the key and come back on restore, where the timer
queues are rebuilt from the entries.

A call into the processor (``init``, ``process`` or a timer callback) runs against a
:class:`_Context` that buffers what it changes; only when the call returns are the state and timers
written and the forwarded records emitted, so a call that raises has no effect but its dead letter.

Emitted records go on with the unit that caused them (the record processed, or the record whose
watermark fired an event-time timer, or the partition's last record for a wall-clock timer), so they
get their scheduling context as every step's outputs do: the next key_by or sink stamps it from that
unit's context with ``policy.build_ctx_at_operator`` (see :mod:`cadenza.worker.engine.context_stamps`).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Unpack

from cadenza.operators import Window
from cadenza.pipelines.processor import Processor, ProcessorFactory, ProcessorRecord
from cadenza.state import ChangelogView, Position, encode_key
from cadenza.state.safe_codec import UnsupportedValueError, check
from cadenza.worker.engine.operators.stateful import StatefulArgs, StatefulOperator
from cadenza.worker.engine.unit import Unit

__all__ = ["ProcessOp"]

_log = logging.getLogger("cadenza.worker")
_NEG_INF = -math.inf
_SAME_KEY: Any = ...
#: Positions in a key's stored entry.
_STATE, _EVENT, _WALL = 0, 1, 2


class TimerCallbackError(Exception):
    """A processor's timer callback raised; the dead letter names the timer (the record is the one
    whose processing fired it)."""

    def __init__(self, kind: str, key: Any, when: float, cause: BaseException) -> None:
        super().__init__(f"{kind} timer of key {key!r} at {when}: {type(cause).__name__}: {cause}")
        self.error_type = type(cause).__name__


class _Context:
    """The :class:`~cadenza.pipelines.ProcessorContext` of one partition's processor."""

    __slots__ = (
        "_active",
        "_cancel",
        "_forwards",
        "_new_state",
        "_schedule",
        "_state_set",
        "_timestamp",
        "key",
        "node_id",
        "op",
        "part",
        "partition",
    )

    def __init__(self, op: ProcessOp, part: _Partition, partition: int) -> None:
        self.op = op
        self.part = part
        self.node_id = op.node_id
        self.partition = partition
        self.key: Any = None
        #: Whether a call with a current key (process or a timer callback) is running.
        self._active = False
        self._timestamp = _NEG_INF
        self._state_set = False
        self._new_state: Any = None
        self._schedule: list[tuple[int, float]] = []
        self._cancel: list[tuple[int, float]] = []
        self._forwards: list[tuple[Any, Any, float]] = []

    def begin(self, key: Any, timestamp: float) -> None:
        self._active = True
        self.key = key
        self._timestamp = timestamp
        self._state_set = False
        self._new_state = None
        self._schedule.clear()
        self._cancel.clear()
        self._forwards.clear()

    def end(self) -> None:
        self._active = False

    def _require(self, what: str) -> None:
        if not self._active:
            raise RuntimeError(
                f"step {self.node_id!r}: context.{what} needs a current key: use it in process() or a "
                "timer callback, not in init() or close()"
            )

    @property
    def state(self) -> Any:
        self._require("state")
        if self._state_set:
            return self._new_state
        entry = self.part.view.get(self.key)
        return None if entry is None else entry[_STATE]

    @state.setter
    def state(self, value: Any) -> None:
        self._require("state")
        self._state_set = True
        self._new_state = value

    @property
    def watermark(self) -> float:
        return self.part.watermark

    def now(self) -> float:
        return self.op.wall_clock()

    def schedule_event_timer(self, when: float) -> None:
        self._require("schedule_event_timer")
        self._schedule.append((_EVENT, _finite(when)))

    def schedule_wall_clock_timer(self, when: float) -> None:
        self._require("schedule_wall_clock_timer")
        self._schedule.append((_WALL, _finite(when)))

    def cancel_event_timer(self, when: float) -> None:
        self._require("cancel_event_timer")
        self._cancel.append((_EVENT, float(when)))

    def cancel_wall_clock_timer(self, when: float) -> None:
        self._require("cancel_wall_clock_timer")
        self._cancel.append((_WALL, float(when)))

    def forward(self, value: Any, *, key: Any = _SAME_KEY, timestamp: float | None = None) -> None:
        self._require("forward")
        self._forwards.append(
            (
                self.key if key is _SAME_KEY else key,
                value,
                self._timestamp if timestamp is None else timestamp,
            )
        )

    def commit(self) -> list[tuple[Any, Any, float]]:
        """Write what the call changed for its key (raises, changing nothing, when the changelog
        cannot hold it); returns the records to emit."""
        key, part = self.key, self.part
        if self._state_set or self._schedule or self._cancel:
            encode_key(key)  # the key must reach the changelog too
            entry = part.view.get(key)
            state = entry[_STATE] if entry is not None else None
            timers = (set(entry[_EVENT]), set(entry[_WALL])) if entry is not None else (set(), set())
            if self._state_set:
                state = self._new_state
                check(state)
            for kind, when in self._cancel:
                timers[kind - 1].discard(when)
            added = [(kind, when) for kind, when in self._schedule if when not in timers[kind - 1]]
            for kind, when in added:
                timers[kind - 1].add(when)
            part.put(key, state, timers[0], timers[1])
            for kind, when in added:
                part.push(kind, when, key)
            self.op.touched.add(self.partition)
        return list(self._forwards)


def _finite(when: float) -> float:
    value = float(when)
    if not math.isfinite(value):
        raise ValueError(f"a timer needs a finite time, got {when!r}")
    return value


@dataclass(slots=True, eq=False)
class _Partition:
    """One operator-partition: its processor, state view, watermark, timer queues and position."""

    view: ChangelogView
    tracker: Any
    sequence: Iterator[int]
    watermark: float = _NEG_INF
    processor: Processor | None = None
    context: _Context | None = None
    #: Per timer kind (event, wall clock), a heap of (time, tie-breaker, key); entries whose timer
    #: is no longer in the key's stored entry (cancelled, fired) are skipped when they surface.
    timers: tuple[list[tuple[float, int, Any]], list[tuple[float, int, Any]]] = field(
        default_factory=lambda: ([], [])
    )
    event_times: dict[int, float] = field(default_factory=dict)
    skip_below: int = -1
    next_offset: int = -1
    origins: dict[int, tuple[int, int]] = field(default_factory=dict)
    current: Unit | None = None
    #: The last unit run here: what a wall-clock timer's outputs and dead letters go on with.
    last: Unit | None = None
    #: The unit whose ``factory()`` or ``init`` failed last (it is dead-lettered once, not per timer).
    init_failed: Unit | None = None

    def put(self, key: Any, state: Any, event: set[float], wall: set[float]) -> None:
        if state is None and not event and not wall:
            if self.view.get(key) is not None:
                del self.view[key]
        else:
            self.view[key] = [state, sorted(event), sorted(wall)]

    def push(self, kind: int, when: float, key: Any) -> None:
        heapq.heappush(self.timers[kind - 1], (when, next(self.sequence), key))


class ProcessOp(StatefulOperator):
    """Runs one processor instance per input partition (see the module docstring)."""

    __slots__ = ("factory", "inputs", "processor_failures", "wall_clock")

    def __init__(
        self,
        node_id: str,
        factory: ProcessorFactory,
        *,
        wall_clock: Callable[[], float] = time.time,
        inputs: tuple[int, ...] | None = (0,),
        **common: Unpack[StatefulArgs],
    ) -> None:
        super().__init__(node_id, **common)
        self.factory = factory
        #: What wall-clock timers are measured on: epoch seconds (a test driver passes its virtual clock).
        self.wall_clock = wall_clock
        self.inputs = inputs
        self.partitions: dict[int, _Partition] = {}
        #: Calls into the processor that raised (each also dead-lettered), timer callbacks included.
        self.processor_failures = 0

    # -- partitions ---------------------------------------------------------------------------------

    def _open(self, partition: int, entries: dict[Any, Any] | None = None) -> _Partition:
        part = _Partition(
            self._view(partition, entries), self._tracker(partition, self.inputs or ()), itertools.count()
        )
        self.partitions[partition] = part
        for key, entry in (entries or {}).items():
            for kind in (_EVENT, _WALL):
                for when in entry[kind]:
                    part.push(kind, when, key)
        return part

    def _resume(self, part: _Partition, position: Position) -> None:
        super()._resume(part, position)
        part.watermark = max(position.watermark, part.tracker.watermark())

    def drop(self, partition: int) -> None:
        """Close the partition's processor and forget its state (revoked or lost)."""
        part = self.partitions.get(partition)
        if part is not None:
            self._close(part)
        super().drop(partition)

    def close_processors(self) -> None:
        """Close every partition's processor (the worker stops); the state stays in the store."""
        for part in self.partitions.values():
            self._close(part)

    def _close(self, part: _Partition) -> None:
        processor, part.processor = part.processor, None
        if processor is None:
            return
        try:
            processor.close()
        except Exception:
            self.processor_failures += 1
            _log.exception("step %r: the processor's close() raised; ignored", self.node_id)

    def _ready(self, part: _Partition, partition: int, unit: Unit) -> Processor | None:
        """The partition's processor, made and initialised on first use; None (and the unit
        dead-lettered, once) when ``factory()`` or ``init`` raised: the next unit tries again."""
        processor = part.processor
        if processor is not None:
            return processor
        if part.init_failed is unit:
            return None  # already tried (and dead-lettered) for this unit
        context = part.context = _Context(self, part, partition)
        try:
            processor = self.factory()
            processor.init(context)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:
            self.processor_failures += 1
            part.init_failed = unit
            self.dead.function_failed(unit, self.node_id, exc)
            return None
        part.processor = processor
        return processor

    # -- records ------------------------------------------------------------------------------------

    def process(self, unit: Unit, key: Any, value: Any, event_time: float, window: Window | None) -> None:
        partition = unit.partition
        part = self._part(partition)
        if not self._fresh(part, unit):
            return
        part.last = unit
        processor = self._ready(part, partition, unit)
        if processor is not None:
            context = part.context
            assert context is not None  # set by _ready
            context.begin(key, event_time)
            record = ProcessorRecord(value, key, event_time, _headers(unit.message.headers()))
            try:
                processor.process(record)
                forwards = context.commit()
            except KeyboardInterrupt:
                raise
            except BaseException as exc:
                self.processor_failures += 1
                self.dead.function_failed(unit, self.node_id, _in_step(exc, self.node_id))
            else:
                self._emit(unit, forwards)
            finally:
                context.end()
        origin = unit.origin
        source = 0 if origin is None else origin[0]
        self._observed(part, partition, source, event_time, unit.offset, record=True)
        self._advance(part, partition, unit)
        self._fire(part, partition, unit, _WALL, self.wall_clock())

    def progress(self, unit: Unit, source: int, event_time: float) -> None:
        """A progress record: upstream partition ``source`` got to ``event_time``; may fire timers."""
        partition = unit.partition
        part = self._part(partition)
        if not self._fresh_progress(part, unit, source):
            return
        part.last = unit
        self._observed(part, partition, source, event_time, unit.offset)
        self._advance(part, partition, unit)

    def fire_wall_clock_timers(self, now: float | None = None) -> int:
        """Fire the wall-clock timers due at ``now`` (default: the wall clock) on every partition that
        ran a record since it was opened; returns how many fired. The worker calls this from its loop,
        the test driver when its clock is advanced."""
        when = self.wall_clock() if now is None else now
        fired = 0
        for partition, part in list(self.partitions.items()):
            if part.last is not None:
                fired += self._fire(part, partition, part.last, _WALL, when)
        return fired

    def _advance(self, part: _Partition, partition: int, unit: Unit) -> None:
        part.watermark = max(part.watermark, part.tracker.watermark())
        # Also timers set at or below a watermark that has not moved (and timers restored as due).
        self._fire(part, partition, unit, _EVENT, part.watermark)

    def _fire(self, part: _Partition, partition: int, unit: Unit, kind: int, upto: float) -> int:
        """Run the callbacks of ``kind`` timers due at ``upto`` in time order; returns how many ran."""
        heap = part.timers[kind - 1]
        fired = 0
        while heap and heap[0][0] <= upto:
            when, _, key = heap[0]
            entry = part.view.get(key)
            if entry is None or when not in entry[kind]:
                heapq.heappop(heap)
                continue  # cancelled, or a second registration of a timer that already fired
            processor = self._ready(part, partition, unit)
            context = part.context
            if processor is None or context is None:
                break  # no processor (its init failed): the timers wait for one
            heapq.heappop(heap)
            timers = (set(entry[_EVENT]), set(entry[_WALL]))
            timers[kind - 1].discard(when)
            part.put(key, entry[_STATE], timers[0], timers[1])
            self.touched.add(partition)
            fired += 1
            # An event-time timer's outputs are at its time; a wall-clock timer's at the watermark (or,
            # before there is one, at the event time of the record it goes on with).
            if kind == _EVENT:
                context.begin(key, when)
            else:
                context.begin(key, part.watermark if part.watermark > _NEG_INF else unit.event_time)
            try:
                if kind == _EVENT:
                    processor.on_event_timer(key, when)
                else:
                    processor.on_wall_clock_timer(key, when)
                forwards = context.commit()
            except KeyboardInterrupt:
                raise
            except BaseException as exc:
                self.processor_failures += 1
                what = "event-time" if kind == _EVENT else "wall-clock"
                _log.warning("step %r: %s timer callback raised: %s", self.node_id, what, exc)
                self.dead.function_failed(unit, self.node_id, TimerCallbackError(what, key, when, exc))
                continue
            finally:
                context.end()
            self._emit(unit, forwards)
        return fired

    def _emit(self, unit: Unit, forwards: list[tuple[Any, Any, float]]) -> None:
        following = self.next
        for key, value, timestamp in forwards:
            following.process(unit, key, value, timestamp, None)

    # -- changelog ------------------------------------------------------------------------------------

    def _position(self, part: _Partition) -> Position:
        return Position(
            offset=part.next_offset,
            watermark=part.watermark,
            event_times=dict(part.event_times),
            origins=dict(part.origins),
        )


def _headers(raw: Any) -> MappingProxyType[str, bytes | None]:
    """A record's Kafka headers as a read-only mapping (a repeated name keeps its last value)."""
    pairs = raw.items() if isinstance(raw, dict) else raw or ()
    return MappingProxyType({name: item.encode() if isinstance(item, str) else item for name, item in pairs})


def _in_step(exc: BaseException, node_id: str) -> BaseException:
    if isinstance(exc, UnsupportedValueError):
        return UnsupportedValueError(f"step {node_id!r}: {exc}")
    return exc
