"""The join step: a windowed stream-stream join per input partition, changelogged like window state.

A join reads two inputs, usually the repartition topics of two ``key_by`` steps. Each input is its own
sub-topology (one input topic each, which is what the scheduler queues work by), so the two
sub-topologies share one :class:`JoinOp`; each reaches it through its own :class:`JoinInput`, which
says which side a record is on. Both inputs must be co-partitioned (the same partition count, and
partition ``p`` of both on the same worker): the state of input partition ``p`` holds both sides'
records of the keys that hash to ``p``, and lives in partition ``p`` of the join's changelog topic.

Per partition: a :class:`~cadenza.operators.WindowedJoin` over a :class:`~cadenza.state.ChangelogView`
of the step's store, and a :class:`~cadenza.operators.WatermarkTracker` whose inputs are the upstream
partitions of each side (named by the records' origin header), all of them known from the plan when
the partition is opened (``sources``), so a side or an upstream partition that the consumer happens to
fetch first cannot push the watermark past the others' records and make them late (the tracker's idle
timeout releases an input that stays silent; see ``docs/concepts/watermarks.md``). Where the plan does not
know a side's inputs, a placeholder input holds the watermark back until that side delivers. Progress
records from upstream (:meth:`JoinOp.progress_side`) move an input's event time without a value.
Late records go to the late topic; matches go downstream as ``joiner(left, right)`` (default: the
tuple ``(left, right)``) with the key and the later event time. A left or outer join also sends an
unmatched record on, as ``joiner(left, None)`` or ``joiner(None, right)`` with its own event time,
once the watermark rules out a match (see :mod:`cadenza.operators.join` and ``docs/concepts/joins.md``); a
watermark raised by a restore keeps such results pending until the partition's next record or
progress record, which carries them. A joiner that raises dead-letters the record that brought the
result out (the second record of a pair; for an unmatched record, the one that moved the watermark).

The changelog position keeps, per side, the next input offset (``Position.inputs``) and the origins
applied, so after a restore each side skips exactly the input the state already holds.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Unpack

from cadenza.operators import LEFT, RIGHT, JoinMatch, WatermarkTracker, Window, WindowedJoin
from cadenza.operators.join import JoinHow
from cadenza.state import ChangelogView, ChangelogWrite, Position, encode_key
from cadenza.state.safe_codec import UnsupportedValueError, check
from cadenza.worker.engine.operators.base import Operator
from cadenza.worker.engine.operators.stateful import StatefulArgs, StatefulOperator
from cadenza.worker.engine.unit import Unit

__all__ = ["JoinInput", "JoinOp"]

_log = logging.getLogger("cadenza.worker")

_SIDES = ("left", "right")


def _input_id(upstream: int, side: int) -> int:
    """One watermark/origin input per (upstream partition, side): the two sides' partitions differ."""
    return upstream * 2 + side


def _placeholder(side: int) -> int:
    """A tracker input standing for a side that has not delivered yet (negative: never an upstream)."""
    return -1 - side


@dataclass(slots=True, eq=False)
class _JoinPartition:
    join: WindowedJoin
    view: ChangelogView
    tracker: WatermarkTracker
    #: Largest event time per input id, for the changelog position.
    event_times: dict[int, float] = field(default_factory=dict)
    #: Per side, the next input offset not yet applied (what the changelog position records).
    inputs: dict[int, int] = field(default_factory=dict)
    #: Per side, input offsets below this are already in the restored state.
    skip_below: dict[int, int] = field(default_factory=dict)
    #: Per input id, the largest (offset, sequence) applied.
    origins: dict[int, tuple[int, int]] = field(default_factory=dict)
    #: Per side, the unit whose values are being applied (a flat_map upstream brings several).
    current: list[Unit | None] = field(default_factory=lambda: [None, None])
    #: The sides whose input partition this worker holds.
    sides: set[int] = field(default_factory=set)
    #: One side was revoked while the other stayed (reported with the next record, since a
    #: revocation of both sides arrives one side at a time).
    split: bool = False
    #: Unmatched records a restore's watermark released, emitted with the next record.
    pending: list[JoinMatch] = field(default_factory=list)


class JoinOp(StatefulOperator):
    """The shared state and logic of one join step; records enter through :attr:`inputs`."""

    __slots__ = ("how", "inputs", "joiner", "lateness", "on", "sources", "within")

    def __init__(
        self,
        node_id: str,
        *,
        within: float,
        allowed_lateness: float,
        on: Any,
        sources: dict[int, tuple[int, ...]] | None = None,
        how: JoinHow = "inner",
        joiner: Callable[[Any, Any], Any] | None = None,
        **common: Unpack[StatefulArgs],
    ) -> None:
        super().__init__(node_id, **common)
        WindowedJoin(within, allowed_lateness, on, how=how)  # fails at worker start on a bad setting
        self.within = within
        self.lateness = allowed_lateness
        self.on = on
        self.how: JoinHow = how
        self.joiner = joiner
        #: Per side, its upstream partitions from the plan ((0,) for a source topic); a side missing
        #: here is stood for by a placeholder input until it delivers.
        self.sources = dict(sources or {})
        self.partitions: dict[int, _JoinPartition] = {}
        self.inputs = (JoinInput(self, LEFT), JoinInput(self, RIGHT))

    def process(self, unit: Unit, key: Any, value: Any, event_time: float, window: Window | None) -> None:
        raise TypeError(f"step {self.node_id!r}: a join is fed through its inputs (JoinOp.inputs)")

    # -- partitions ---------------------------------------------------------------------------------

    def _open(self, partition: int, entries: dict[Any, Any] | None = None) -> _JoinPartition:
        view = self._view(partition, entries)
        join = WindowedJoin(self.within, self.lateness, self.on, state=view, how=self.how)
        initial: list[int] = []
        for side in (LEFT, RIGHT):
            known = self.sources.get(side)
            if known is None:
                initial.append(_placeholder(side))
            else:
                initial.extend(_input_id(upstream, side) for upstream in known)
        part = self.partitions[partition] = _JoinPartition(join, view, self._tracker(partition, initial))
        return part

    def restore_side(
        self, side: int, partition: int, entries: dict[Any, Any], position: Position | None
    ) -> None:
        """Restore ``partition`` for one side; the second side of a partition already here keeps its
        state as it is (it is at least as new as the changelog, which is written after every batch)."""
        part = self.partitions.get(partition)
        if part is not None and part.sides:
            part.sides.add(side)
            part.split = False
            return
        self._forget(partition)
        self._reopen(partition, entries, position).sides.add(side)

    def _resume(self, part: _JoinPartition, position: Position) -> None:
        """Take up a restored partition: per side its next input offset, then the watermark, which
        may release unmatched records (sent on with the partition's next record)."""
        part.inputs = dict(position.inputs)
        part.skip_below = dict(position.inputs)
        part.origins = dict(position.origins)
        part.event_times = dict(position.event_times)
        tracker = part.tracker
        for input_id, event_time in position.event_times.items():
            tracker.remove_partition(_placeholder(input_id % 2))
            tracker.observe(input_id, event_time)
        part.join.advance(max(position.watermark, tracker.watermark()))
        part.pending = part.join.take_unmatched()

    def drop_side(self, side: int, partition: int) -> None:
        """Forget ``partition`` once neither side of it is held here any more."""
        part = self.partitions.get(partition)
        if part is None:
            return
        part.sides.discard(side)
        if part.sides:
            part.split = True
            return
        self._forget(partition)

    # -- records ------------------------------------------------------------------------------------

    def process_side(self, side: int, unit: Unit, key: Any, value: Any, event_time: float) -> None:
        partition = unit.partition
        part = self._part(partition)
        if part.split:
            part.split = False
            _log.warning(
                "step %r: input partition %d of one side moved to another worker while the other side's "
                "stayed here; a join needs both inputs of a partition on one worker (consumer setting "
                "partition.assignment.strategy=range), or its results are incomplete",
                self.node_id,
                partition,
            )
        offset = unit.offset
        origin = unit.origin
        upstream = 0 if origin is None else origin[0]
        if offset < part.skip_below.get(side, -1):
            self.counters.replay_skipped += 1
            part.tracker.heard(_input_id(upstream, side))  # replaying is not being silent
            return
        if origin is not None and unit is not part.current[side]:
            part.current[side] = unit
            input_id = _input_id(upstream, side)
            mark = (origin[1], origin[2])
            seen = part.origins.get(input_id)
            if seen is not None and mark <= seen:
                part.current[side] = None  # every value of this unit is a copy
                self.counters.replay_skipped += 1
                part.tracker.heard(input_id)
                return
            part.origins[input_id] = mark
        join = part.join
        try:
            encode_key(key)  # state must reach the changelog: refuse what cannot, before it is stored
            check(value)
            matches, late = join.add(side, key, event_time, value)
        except UnsupportedValueError as exc:
            self.dead.function_failed(
                unit, self.node_id, UnsupportedValueError(f"step {self.node_id!r}: {exc}")
            )
            return
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # the user's on() raised, or the event time is not a number
            self.dead.function_failed(unit, self.node_id, exc)
            return
        if late is not None:
            self.dead.late(unit, self.node_id, late, value, join.watermark)
        input_id = _input_id(upstream, side)
        tracker = part.tracker
        part.sides.add(side)
        tracker.remove_partition(_placeholder(side))
        if self.records_progress:
            tracker.observe(input_id, event_time)
            event_times = part.event_times
            if event_time > event_times.get(input_id, -float("inf")):
                event_times[input_id] = event_time
        else:  # only its progress records say how far the input got (see StatefulOperator)
            tracker.add_partition(input_id)
            tracker.heard(input_id)
        part.inputs[side] = offset + 1
        self.touched.add(partition)
        join.advance(tracker.watermark())
        if matches:
            self._emit(unit, matches)
        self._emit_unmatched(unit, part)

    def _emit(self, unit: Unit, results: list[JoinMatch]) -> None:
        following, joiner = self.next, self.joiner
        for result in results:
            if joiner is None:
                value: Any = (result.left, result.right)
            else:
                try:
                    value = joiner(result.left, result.right)
                except KeyboardInterrupt:
                    raise
                except BaseException as exc:  # the user's joiner
                    self.dead.function_failed(unit, self.node_id, exc)
                    continue
            following.process(unit, result.key, value, result.event_time, None)

    def _emit_unmatched(self, unit: Unit, part: _JoinPartition) -> None:
        """Send on what a restore released and what the watermark just ruled out a match for."""
        if part.pending:
            pending, part.pending = part.pending, []
            self._emit(unit, pending)
        unmatched = part.join.take_unmatched()
        if unmatched:
            self._emit(unit, unmatched)

    def progress_side(self, side: int, unit: Unit, upstream: int, event_time: float) -> None:
        """Apply a progress record of ``side``: its upstream partition ``upstream`` got to ``event_time``."""
        partition = unit.partition
        part = self._part(partition)
        if unit.offset < part.skip_below.get(side, -1):
            return
        part.current[side] = None
        input_id = _input_id(upstream, side)
        part.sides.add(side)
        part.tracker.remove_partition(_placeholder(side))
        part.tracker.observe(input_id, event_time)
        if event_time > part.event_times.get(input_id, -float("inf")):
            part.event_times[input_id] = event_time
        part.inputs[side] = unit.offset + 1
        self.touched.add(partition)
        part.join.advance(part.tracker.watermark())
        self._emit_unmatched(unit, part)

    # -- changelog ------------------------------------------------------------------------------------

    def _position(self, part: _JoinPartition) -> Position:
        return Position(
            offset=-1,
            watermark=part.join.watermark,
            event_times=dict(part.event_times),
            origins=dict(part.origins),
            inputs=dict(part.inputs),
        )


class JoinInput(Operator):
    """One side of a join as an operator of its sub-topology, and as that sub-topology's stateful step.

    Restoring or dropping a partition through an input tells the join which side's partition arrived
    or left; changelog writes are the join's (whichever input is asked first writes them all).
    """

    __slots__ = ("join", "side")

    def __init__(self, join: JoinOp, side: int) -> None:
        super().__init__(join.node_id)
        self.join = join
        self.side = side

    def process(self, unit: Unit, key: Any, value: Any, event_time: float, window: Window | None) -> None:
        self.join.process_side(self.side, unit, key, value, event_time)

    @property
    def changelog_topic(self) -> str:
        return self.join.changelog_topic

    @property
    def touched(self) -> set[int]:
        return self.join.touched

    def restore(self, partition: int, entries: dict[Any, Any], position: Position | None) -> None:
        self.join.restore_side(self.side, partition, entries, position)

    def drop(self, partition: int) -> None:
        self.join.drop_side(self.side, partition)

    def changelog_writes(self) -> list[tuple[int, list[ChangelogWrite]]]:
        return self.join.changelog_writes()

    def progress(self, unit: Unit, source: int, event_time: float) -> None:
        self.join.progress_side(self.side, unit, source, event_time)

    @property
    def idle_timeouts(self) -> int:
        return self.join.idle_timeouts

    def __repr__(self) -> str:
        return f"JoinInput({self.node_id!r}, {_SIDES[self.side]})"
