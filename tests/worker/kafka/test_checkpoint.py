"""Checkpointing in isolation: the offsets a commit takes, the order it makes things durable in, when
it is due, and the checkpoints that do not wait (taken, then moved on as acknowledgements arrive).
Pure logic, no broker: the journal below stands for the producer and acknowledges only when told; the
commit to a real group is covered by the worker's broker tests, e.g. ``test_crash_restore_kafka`` and
``test_rebalance_kafka``."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from confluent_kafka import TopicPartition
from hypothesis import given
from hypothesis import strategies as st

from cadenza.infra.kafka.errors import DeliveryError
from cadenza.state import ChangelogWrite, Position
from cadenza.worker.engine.counters import WorkerCounters
from cadenza.worker.engine.inflight import InFlight, Pending
from cadenza.worker.engine.output import Epoch, Output
from cadenza.worker.engine.unit import Unit
from cadenza.worker.kafka.checkpoint import MAX_OPEN, Checkpoint


class Journal:
    """An in-memory produce stage that writes down what happened, in order, and acknowledges its
    records only when :meth:`ack` (or a flush) says so."""

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []
        self.on_flush: list[Any] = []
        self.epoch = Epoch(Output.__new__(Output))
        #: Produced and not yet acknowledged, oldest first: (epoch, event).
        self.unacked: list[tuple[Epoch, tuple[Any, ...]]] = []
        self.failed = 0

    def produce(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        headers: list[tuple[str, str | bytes | None]] | None = None,
        partition: int = -1,
    ) -> None:
        event = ("produce", topic, key, value, partition)
        self.events.append(event)
        self.epoch.unacked += 1
        self.unacked.append((self.epoch, event))

    def ack(self, which: Any = None) -> None:
        """Acknowledge the records ``which`` picks (every one by default), in any order."""
        kept = []
        for epoch, event in self.unacked:
            if which is None or which(event):
                epoch.unacked -= 1
            else:
                kept.append((epoch, event))
        self.unacked = kept

    def flush(self) -> None:
        self.events.append(("flush",))
        self.ack()
        for action in self.on_flush:
            action()
        self.on_flush.clear()
        self.raise_failed()

    def seal(self) -> Epoch:
        sealed, self.epoch = self.epoch, Epoch(Output.__new__(Output))
        return sealed

    def serve(self) -> None:
        self.events.append(("serve",))

    def raise_failed(self) -> None:
        if self.failed:
            raise DeliveryError(f"{self.failed} record(s) were not delivered")


class Step:
    """A stateful step with changed keys on some partitions (the checkpoint's view of a window)."""

    def __init__(self, node_id: str, changed: dict[int, list[ChangelogWrite]]) -> None:
        self.node_id = node_id
        self.changelog_topic = f"{node_id}-changelog"
        self.changed = changed
        self.dropped: list[int] = []

    @property
    def touched(self) -> Collection[int]:
        return list(self.changed)

    def changelog_writes(self) -> list[tuple[int, list[ChangelogWrite]]]:
        writes = sorted(self.changed.items())
        self.changed = {}
        return writes

    def restore(self, partition: int, entries: dict[Any, Any], position: Position | None) -> None:
        raise AssertionError("a checkpoint never restores")

    def drop(self, partition: int) -> None:
        self.dropped.append(partition)

    def progress(self, unit: Unit, source: int, event_time: float) -> None:
        raise AssertionError("a checkpoint never moves watermarks")

    @property
    def idle_timeouts(self) -> int:
        return 0


def started(interval: float = 0.2) -> tuple[Checkpoint, Journal]:
    journal = Journal()
    checkpoint = Checkpoint(WorkerCounters(), interval, inflight=InFlight(), output=journal)
    return checkpoint, journal


def ran(checkpoint: Checkpoint, topic: str, partition: int, offset: int) -> None:
    """A record admitted with one unit, which has run."""
    admit(checkpoint, topic, partition, offset, 1)[1] -= 1


def produced(journal: Journal) -> list[tuple[Any, ...]]:
    return [event for event in journal.events if event[0] == "produce"]


def admit(checkpoint: Checkpoint, topic: str, partition: int, offset: int, units: int) -> Pending:
    inflight = checkpoint.inflight
    pending: Pending = [offset, units]
    inflight.admitted(inflight.progress(topic, partition), offset, pending)
    return pending


def test_outputs_are_flushed_before_state_and_state_before_the_offsets() -> None:
    checkpoint, journal = started()
    step = Step("w", {1: [(b"k", b"v")], 0: [(b"j", None)]})
    checkpoint.windows.append(step)
    ran(checkpoint, "in", 0, 7)
    checkpoint.commit(())
    assert journal.events == [
        ("flush",),  # the outputs the state was computed with first
        ("produce", "w-changelog", b"j", None, 0),
        ("produce", "w-changelog", b"k", b"v", 1),
        ("flush",),  # then the state: only now may the offset be committed
    ]
    assert checkpoint.offsets.positions == {("in", 0): 8}  # no group consumer here: kept pending
    journal.events.clear()
    checkpoint.commit(())
    assert journal.events == [("flush",)]  # nothing touched since: no changelog round


def test_records_finishing_during_the_flush_wait_for_the_next_commit() -> None:
    checkpoint, journal = started()
    first = admit(checkpoint, "in", 0, 0, 1)
    second = admit(checkpoint, "in", 0, 1, 1)
    first[1] -= 1

    def finish_second() -> None:  # its outputs may have been produced after the flush began
        second[1] -= 1

    journal.on_flush.append(finish_second)
    checkpoint.commit(())
    assert checkpoint.offsets.positions == {("in", 0): 1}
    checkpoint.commit(())
    assert checkpoint.offsets.positions == {("in", 0): 2}


def test_a_stopped_pipelines_state_is_no_longer_changelogged() -> None:
    checkpoint, journal = started()
    kept, stopped = Step("kept", {0: [(b"a", b"1")]}), Step("stopped", {0: [(b"b", b"2")]})
    checkpoint.windows.extend([kept, stopped])
    checkpoint.stop_changelogging([stopped])
    checkpoint.commit(())
    assert [e[1] for e in journal.events if e[0] == "produce"] == ["kept-changelog"]


def test_forgotten_partitions_lose_their_pending_offsets_and_in_flight_records() -> None:
    checkpoint, _ = started()
    admit(checkpoint, "in", 0, 3, 0)
    admit(checkpoint, "in", 1, 5, 0)
    admit(checkpoint, "in", 1, 6, 1)
    checkpoint.commit(())
    assert checkpoint.offsets.positions == {("in", 0): 4, ("in", 1): 6}
    checkpoint.forget([TopicPartition("in", 1)])
    assert checkpoint.offsets.positions == {("in", 0): 4}
    assert set(checkpoint.inflight.partitions) == {("in", 0)}


def test_commit_is_due_when_something_finished_and_the_buffer_ran_dry_or_the_interval_is_up() -> None:
    checkpoint, _ = started(interval=0.2)
    checkpoint.last = 100.0
    assert not checkpoint.due(100.05, worked=False, buffered=0)  # nothing to commit
    assert checkpoint.due(100.05, worked=True, buffered=0)  # buffer dry
    assert not checkpoint.due(100.05, worked=True, buffered=3)  # busy, interval not up
    assert checkpoint.due(100.25, worked=True, buffered=3)  # busy, interval up
    checkpoint.offsets.positions[("in", 0)] = 9  # deferred by a rebalance: still to go out
    assert checkpoint.due(100.05, worked=False, buffered=0)


# Each record: (partition, units); each action: finish one unit of the record with that index, or
# take a checkpoint.
records_st = st.lists(st.tuples(st.integers(0, 2), st.integers(0, 3)), min_size=1, max_size=30)


@given(records=records_st, data=st.data())
def test_committed_offsets_never_pass_an_unfinished_record(
    records: list[tuple[int, int]], data: st.DataObject
) -> None:
    checkpoint, _ = started()
    offsets: dict[int, int] = {}
    admitted: list[tuple[int, int, Pending]] = []
    for partition, units in records:
        offset = offsets.get(partition, 0)
        offsets[partition] = offset + 1
        admitted.append((partition, offset, admit(checkpoint, "in", partition, offset, units)))
    remaining = [units for _, units in records]
    committed: dict[int, int] = {}
    for _ in range(data.draw(st.integers(0, sum(remaining) + 3))):
        open_ = [i for i, left in enumerate(remaining) if left > 0]
        finish: bool = data.draw(st.booleans())
        if open_ and finish:
            index = data.draw(st.sampled_from(open_))
            remaining[index] -= 1
            admitted[index][2][1] -= 1
            continue
        checkpoint.commit(())
        for (_, partition), offset in checkpoint.offsets.positions.items():
            committed[partition] = offset
        # Brute force: per partition, the first offset with units left, else one past the last.
        for partition, fetched in offsets.items():
            unfinished = [
                off for (p, off, _), left in zip(admitted, remaining, strict=True) if p == partition and left
            ]
            assert committed.get(partition) == (min(unfinished) if unfinished else fetched)


# -- checkpoints that do not wait -----------------------------------------------------------------------


def test_a_checkpoint_waits_for_its_outputs_then_its_state_then_commits_without_flushing() -> None:
    checkpoint, journal = started()
    step = Step("w", {0: [(b"k", b"v")]})
    checkpoint.windows.append(step)
    ran(checkpoint, "in", 0, 7)
    journal.produce("out", b"result", None)  # the record's output, not yet acknowledged
    checkpoint.take()
    assert checkpoint.open == 1
    checkpoint.advance(())
    assert produced(journal) == [("produce", "out", None, b"result", -1)]  # state waits for the output
    assert not checkpoint.offsets.positions
    journal.ack()
    checkpoint.advance(())
    assert produced(journal)[1:] == [("produce", "w-changelog", b"k", b"v", 0)]
    assert not checkpoint.offsets.positions  # the offset waits for the state
    journal.ack()
    checkpoint.advance(())
    assert checkpoint.offsets.positions == {("in", 0): 8}
    assert checkpoint.open == 0
    assert ("flush",) not in journal.events  # nothing waited


def test_an_earlier_unacknowledged_output_holds_back_a_later_checkpoint() -> None:
    checkpoint, journal = started()
    first = admit(checkpoint, "in", 0, 0, 1)
    first[1] -= 1
    journal.produce("out", b"first", None)
    checkpoint.take()
    second = admit(checkpoint, "in", 0, 1, 1)
    second[1] -= 1
    journal.produce("out", b"second", None)
    checkpoint.take()
    journal.ack(lambda event: event[3] == b"second")  # another partition answered first
    checkpoint.advance(())
    assert not checkpoint.offsets.positions
    assert checkpoint.open == 2
    journal.ack()
    checkpoint.advance(())
    assert checkpoint.offsets.positions == {("in", 0): 2}
    assert checkpoint.open == 0


def test_changelog_writes_of_successive_checkpoints_reach_the_log_in_order() -> None:
    checkpoint, journal = started()
    step = Step("w", {0: [(b"k", b"1")]})
    checkpoint.windows.append(step)
    checkpoint.take()
    step.changed = {0: [(b"k", b"2")]}
    checkpoint.take()
    journal.ack()
    for _ in range(4):
        checkpoint.advance(())
        journal.ack()
    assert [event[3] for event in produced(journal)] == [b"1", b"2"]
    assert checkpoint.open == 0


def test_a_waiting_commit_makes_every_open_checkpoint_durable() -> None:
    checkpoint, journal = started()
    step = Step("w", {0: [(b"k", b"1")]})
    checkpoint.windows.append(step)
    ran(checkpoint, "in", 0, 4)
    checkpoint.take()
    step.changed = {0: [(b"k", b"2")]}
    checkpoint.commit(())
    assert journal.events == [
        ("flush",),
        ("produce", "w-changelog", b"k", b"1", 0),
        ("produce", "w-changelog", b"k", b"2", 0),
        ("flush",),
    ]
    assert checkpoint.offsets.positions == {("in", 0): 5}
    assert checkpoint.open == 0
    later = admit(checkpoint, "in", 0, 5, 1)  # the epochs sealed so far count as acknowledged
    later[1] -= 1
    checkpoint.take()
    journal.ack()
    checkpoint.advance(())
    assert checkpoint.offsets.positions == {("in", 0): 6}


def test_a_lost_partition_leaves_the_open_checkpoints() -> None:
    checkpoint, journal = started()
    step = Step("w", {0: [(b"a", b"0")], 1: [(b"b", b"1")]})
    checkpoint.windows.append(step)
    for partition in (0, 1):
        ran(checkpoint, "in", partition, 3)
    checkpoint.take()
    checkpoint.forget([TopicPartition("in", 1)], [(step, 1)])
    journal.ack()
    checkpoint.advance(())
    journal.ack()
    checkpoint.advance(())
    assert [event[2] for event in produced(journal)] == [b"a"]  # not partition 1's stale state
    assert checkpoint.offsets.positions == {("in", 0): 4}


def test_a_failed_delivery_stops_the_checkpoint() -> None:
    checkpoint, journal = started()
    ran(checkpoint, "in", 0, 0)
    checkpoint.take()
    journal.failed = 1
    try:
        checkpoint.advance(())
    except DeliveryError:
        pass
    else:
        raise AssertionError("a lost output did not stop the checkpoint")
    assert not checkpoint.offsets.positions


def test_no_more_checkpoints_are_taken_while_the_open_ones_are_at_the_bound() -> None:
    checkpoint, journal = started(interval=0.2)
    for index in range(MAX_OPEN):
        journal.produce("out", b"x", None)
        checkpoint.take()
        assert checkpoint.open == index + 1
    assert not checkpoint.due(checkpoint.last + 1.0, worked=True, buffered=5)
    journal.ack()
    checkpoint.advance(())
    assert checkpoint.open == 0
    assert checkpoint.due(checkpoint.last + 1.0, worked=True, buffered=5)


# Each step: finish a unit of a record (whose output is produced then), take a checkpoint, acknowledge
# some produced records, or move the checkpoints on.
@given(records=records_st, data=st.data())
def test_a_committed_offset_never_passes_a_record_whose_output_is_unacknowledged(
    records: list[tuple[int, int]], data: st.DataObject
) -> None:
    checkpoint, journal = started()
    admitted: list[tuple[int, int, Pending]] = []
    offsets: dict[int, int] = {}
    for partition, units in records:
        offset = offsets.get(partition, 0)
        offsets[partition] = offset + 1
        admitted.append((partition, offset, admit(checkpoint, "in", partition, offset, units)))
    remaining = [units for _, units in records]
    for _ in range(data.draw(st.integers(0, 3 * sum(remaining) + 6))):
        action = data.draw(st.sampled_from(["finish", "take", "ack", "advance"]))
        open_ = [i for i, left in enumerate(remaining) if left > 0]
        if action == "finish" and open_:
            index = data.draw(st.sampled_from(open_))
            remaining[index] -= 1
            admitted[index][2][1] -= 1
            journal.produce("out", None, f"{index}".encode())  # the unit's output
        elif action == "take":
            checkpoint.take()
        elif action == "ack":
            journal.ack(lambda _: data.draw(st.booleans()))
        else:
            checkpoint.advance(())
        unacked = {int(event[2]) for _, event in journal.unacked if event[1] == "out"}
        for (_, partition), offset in checkpoint.offsets.positions.items():
            # Brute force: every record below the committed offset finished, outputs acknowledged.
            for index, (p, off, _) in enumerate(admitted):
                if p == partition and off < offset:
                    assert remaining[index] == 0 and index not in unacked
