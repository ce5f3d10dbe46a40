"""Checkpointing in isolation: the offsets a commit takes, the order it makes things durable in, and
when it is due (pure logic, no broker; the commit to a real group is covered by the worker's broker
tests, e.g. ``test_crash_restore_kafka`` and ``test_rebalance_kafka``)."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from confluent_kafka import TopicPartition
from hypothesis import given
from hypothesis import strategies as st

from cadenza.state import ChangelogWrite, Position
from cadenza.worker.checkpoint import Checkpoint
from cadenza.worker.counters import WorkerCounters
from cadenza.worker.inflight import Pending
from cadenza.worker.unit import Unit


class Journal:
    """An in-memory produce stage that writes down what happened, in order."""

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []
        self.on_flush: list[Any] = []

    def produce(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        headers: list[tuple[str, str | bytes | None]] | None = None,
        partition: int = -1,
    ) -> None:
        self.events.append(("produce", topic, key, value, partition))

    def flush(self) -> None:
        self.events.append(("flush",))
        for action in self.on_flush:
            action()
        self.on_flush.clear()


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
    checkpoint = Checkpoint(WorkerCounters(), interval)
    journal = Journal()
    checkpoint.output = journal
    return checkpoint, journal


def admit(checkpoint: Checkpoint, topic: str, partition: int, offset: int, units: int) -> Pending:
    inflight = checkpoint.inflight
    pending: Pending = [offset, units]
    inflight.admitted(inflight.progress(topic, partition), offset, pending)
    return pending


def test_outputs_are_flushed_before_state_and_state_before_the_offsets() -> None:
    checkpoint, journal = started()
    step = Step("w", {1: [(b"k", b"v")], 0: [(b"j", None)]})
    checkpoint.windows.append(step)
    done = admit(checkpoint, "in", 0, 7, 1)
    done[1] -= 1
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
    checkpoint.collect()
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


def test_committing_before_the_worker_started_is_refused() -> None:
    checkpoint = Checkpoint(WorkerCounters(), 0.2)
    try:
        checkpoint.commit(())
    except RuntimeError as exc:
        assert "no output" in str(exc)
    else:
        raise AssertionError("a checkpoint without an output committed")


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
