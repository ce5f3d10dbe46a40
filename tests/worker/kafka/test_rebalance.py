"""Rebalance handling in isolation: what assign, revoke and lost do to the assignment, the group
state and the worker's commit (pure logic, no broker; partitions really moving between workers are
covered by ``test_rebalance_kafka``)."""

from __future__ import annotations

import threading

import pytest
from confluent_kafka import TopicPartition

from cadenza.worker.kafka.rebalance import Rebalance


class Calls:
    """What the handler asked of the worker, in order; ``restore_fails`` makes the restore raise."""

    def __init__(self, queued: int = 0) -> None:
        self.log: list[tuple[str, list[tuple[str, int]]]] = []
        self.queued = queued
        self.restore_fails: Exception | None = None

    def restore(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        self.log.append(("restore", [(tp.topic, tp.partition) for tp in partitions]))
        if self.restore_fails is not None:
            raise self.restore_fails
        return []

    def commit(self) -> None:
        self.log.append(("commit", []))

    def forget(self, partitions: list[TopicPartition]) -> int:
        self.log.append(("forget", [(tp.topic, tp.partition) for tp in partitions]))
        return self.queued


def handler(calls: Calls) -> Rebalance:
    return Rebalance(calls.restore, calls.commit, calls.forget)


def joined(rebalance: Rebalance) -> bool:
    """Read through a call, so that a type checker does not carry an earlier assertion over."""
    return rebalance.joined


def tps(*keys: tuple[str, int]) -> list[TopicPartition]:
    return [TopicPartition(topic, partition) for topic, partition in keys]


def test_assigned_partitions_are_restored_before_they_count_as_assigned() -> None:
    calls = Calls()
    rebalance = handler(calls)
    assert not rebalance.joined and not rebalance.wait_assigned(0.0)
    rebalance.on_assign(None, tps(("a", 0), ("a", 1)))
    assert calls.log == [("restore", [("a", 0), ("a", 1)])]
    assert rebalance.assignment == {("a", 0), ("a", 1)}
    assert joined(rebalance) and rebalance.wait_assigned(0.0)
    rebalance.on_assign(None, tps(("b", 0)))  # incremental (cooperative-sticky): added to what is held
    assert rebalance.assignment == {("a", 0), ("a", 1), ("b", 0)}


def test_an_empty_assignment_joins_the_group_but_assigns_nothing() -> None:
    rebalance = handler(Calls())
    rebalance.on_assign(None, [])
    assert rebalance.joined
    assert not rebalance.wait_assigned(0.0)
    assert rebalance.assignment == set()


def test_a_failed_restore_breaks_the_worker_and_is_kept_for_the_run_loop() -> None:
    calls = Calls()
    calls.restore_fails = ValueError("changelog unreadable")
    rebalance = handler(calls)
    with pytest.raises(ValueError, match="unreadable"):
        rebalance.on_assign(None, tps(("a", 0)))
    assert rebalance.broken and not rebalance.joined
    assert rebalance.assignment == set()  # never run records on missing state
    with pytest.raises(ValueError, match="unreadable"):
        rebalance.raise_failure()  # in case the client swallowed what the callback raised
    rebalance.on_revoke(None, tps(("a", 0)))
    assert ("commit", []) not in calls.log  # a broken worker commits nothing


def test_revocation_commits_what_finished_then_hands_the_partitions_back() -> None:
    calls = Calls(queued=3)
    rebalance = handler(calls)
    rebalance.on_assign(None, tps(("a", 0), ("a", 1)))
    calls.log.clear()
    rebalance.on_revoke(None, tps(("a", 1)))
    assert calls.log == [("commit", []), ("forget", [("a", 1)])]
    assert rebalance.assignment == {("a", 0)}
    rebalance.raise_failure()  # nothing failed: does not raise


def test_lost_partitions_are_dropped_without_a_commit() -> None:
    calls = Calls()
    rebalance = handler(calls)
    rebalance.on_assign(None, tps(("a", 0), ("a", 1)))
    calls.log.clear()
    rebalance.on_lost(None, tps(("a", 0), ("a", 1)))
    assert calls.log == [("forget", [("a", 0), ("a", 1)])]
    assert rebalance.assignment == set()


def test_the_assignment_can_be_read_from_another_thread_while_it_changes() -> None:
    rebalance = handler(Calls())
    seen: list[int] = []
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            seen.append(len(rebalance.assignment))  # a copy: never "set changed size during iteration"

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for round_ in range(200):
            rebalance.on_assign(None, tps(*((f"t{round_}", p) for p in range(20))))
            rebalance.on_revoke(None, tps(*((f"t{round_}", p) for p in range(20))))
    finally:
        done.set()
        reader.join()
    assert rebalance.assignment == set()
    assert seen and max(seen) <= 20
