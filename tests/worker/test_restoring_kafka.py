"""The state restorer against a real broker: partitions come back independently, one that goes
before its restore finished is dropped from it, a changelog shared by two inputs (a join's) is read
once, and a restore past its timeout fails instead of letting records run on missing state."""

from __future__ import annotations

import time
import uuid
from typing import Any, cast

import pytest

from cadenza.infra.kafka.errors import KafkaClientError
from cadenza.settings import KafkaSettings
from cadenza.state import ChangelogView, InMemoryStateStore, Position
from cadenza.testing.pytest_plugin import NewTopic
from cadenza.worker.engine.counters import WorkerCounters
from cadenza.worker.engine.idle_clock import IdleClock
from cadenza.worker.engine.operators.stateful import StatefulStep
from cadenza.worker.kafka.restoring import StateRestorer
from tests.worker.kafka_io import produce

pytestmark = pytest.mark.kafka


class RestoredInto:
    """What a stateful step is told when its partition's state is back."""

    def __init__(self, changelog_topic: str, node_id: str = "window") -> None:
        self.changelog_topic = changelog_topic
        self.node_id = node_id
        self.restored: dict[int, tuple[dict[Any, Any], Position | None]] = {}

    def restore(self, partition: int, entries: dict[Any, Any], position: Position | None) -> None:
        assert partition not in self.restored, "a partition was loaded twice"
        self.restored[partition] = (entries, position)


def write_state(settings: KafkaSettings, topic: str, partition: int, keys: int) -> dict[Any, Any]:
    """``keys`` keys of state in one batch, and its position marker, on ``topic[partition]``."""
    store = InMemoryStateStore()
    view = ChangelogView(store, partition)
    for i in range(keys):
        view[f"k{i}"] = i
    produce(settings, topic, [(k, v, partition) for k, v in view.drain(Position(offset=keys))])
    return {f"k{i}": i for i in range(keys)}


def restore_until_settled(restorer: StateRestorer, seconds: float = 30.0) -> list[list[tuple[str, int]]]:
    """Step until nothing waits; what became ready at each step that readied something."""
    readied: list[list[tuple[str, int]]] = []
    for _ in range(int(seconds / 0.01)):
        if not restorer.restoring:
            return readied
        ready = restorer.step(0.01)
        if ready:
            readied.append(ready)
    raise AssertionError(f"still restoring {restorer.holding} after {seconds}s")


def test_partitions_come_back_on_their_own_and_a_join_changelog_is_read_once(
    kafka_settings: KafkaSettings, new_topic: NewTopic
) -> None:
    changelog = new_topic(partitions=3, configs={"cleanup.policy": "compact"})
    # Big enough to take many fetches (some 90,000 records against a fetch's 1 MB per partition), so that it
    # cannot finish before the small partition's first fetch (20,000 once did, in one or two).
    big = write_state(kafka_settings, changelog, 0, 90_000)
    small = write_state(kafka_settings, changelog, 1, 3)
    step = RestoredInto(changelog)
    counters = WorkerCounters()
    restorer = StateRestorer(kafka_settings, f"g-{uuid.uuid4().hex[:6]}", counters, timeout=60)
    window = cast(StatefulStep, step)
    try:
        held = restorer.begin(
            [
                (("big-in", 0), [(window, 0)]),
                (("small-left", 1), [(window, 1)]),
                (("small-right", 1), [(window, 1)]),  # the other side of a join: the same changelog
                (("empty-in", 2), [(window, 2)]),
                (("stateless-in", 0), []),
            ]
        )
        assert sorted(held) == [("big-in", 0), ("empty-in", 2), ("small-left", 1), ("small-right", 1)]
        assert not restorer.settled.is_set()
        readied = restore_until_settled(restorer)
    finally:
        restorer.close()
    order = [key for ready in readied for key in ready]
    assert sorted(order) == sorted(held)
    assert order.index(("small-left", 1)) < order.index(("big-in", 0)), "the small state waited for the big"
    assert step.restored[0] == (big, Position(offset=len(big)))
    assert step.restored[1] == (small, Position(offset=3))
    assert step.restored[2] == ({}, None)
    assert counters.restored_keys == len(big) + len(small)
    assert restorer.settled.is_set()


def test_window_inputs_idle_clock_stands_still_while_a_partition_waits(
    kafka_settings: KafkaSettings, new_topic: NewTopic
) -> None:
    changelog = new_topic(partitions=1, configs={"cleanup.policy": "compact"})
    write_state(kafka_settings, changelog, 0, 1_000)
    wall = [100.0]
    clock = IdleClock(lambda: wall[0])
    step = cast(StatefulStep, RestoredInto(changelog))
    restorer = StateRestorer(
        kafka_settings, f"g-{uuid.uuid4().hex[:6]}", WorkerCounters(), timeout=60, idle_clock=clock
    )
    try:
        restorer.begin([(("in", 0), [(step, 0)])])
        wall[0] += 5.0  # silence while the partition waits is the worker's, not its input's
        assert clock.now() == 100.0
        restore_until_settled(restorer)
    finally:
        restorer.close()
    wall[0] += 2.0
    assert clock.now() == 102.0  # counted again once nothing waits


def test_a_partition_that_goes_mid_restore_is_dropped_from_it(
    kafka_settings: KafkaSettings, new_topic: NewTopic
) -> None:
    changelog = new_topic(partitions=2, configs={"cleanup.policy": "compact"})
    write_state(kafka_settings, changelog, 0, 20_000)
    kept = write_state(kafka_settings, changelog, 1, 10)
    step = RestoredInto(changelog)
    restorer = StateRestorer(kafka_settings, f"g-{uuid.uuid4().hex[:6]}", WorkerCounters(), timeout=60)
    window = cast(StatefulStep, step)
    try:
        restorer.begin([(("in", 0), [(window, 0)]), (("in", 1), [(window, 1)])])
        restorer.step(0.001)
        assert restorer.forget([("in", 0)]) == (1 not in step.restored)
        assert ("in", 0) not in restorer.holding
        restore_until_settled(restorer)
    finally:
        restorer.close()
    assert 0 not in step.restored, "a partition that went was still loaded"
    assert step.restored[1][0] == kept


def test_a_restore_past_its_timeout_fails(kafka_settings: KafkaSettings, new_topic: NewTopic) -> None:
    changelog = new_topic(partitions=1, configs={"cleanup.policy": "compact"})
    write_state(kafka_settings, changelog, 0, 50_000)
    restorer = StateRestorer(kafka_settings, f"g-{uuid.uuid4().hex[:6]}", WorkerCounters(), timeout=0.01)
    try:
        restorer.begin([(("in", 0), [(cast(StatefulStep, RestoredInto(changelog)), 0)])])
        time.sleep(0.05)  # time between slices is not reading: it does not count
        restorer.step(0.001)
        assert restorer.restoring
        # 10 ms of reading is not enough for 50,000 records.
        with pytest.raises(KafkaClientError, match="restore_timeout"):
            for _ in range(100):
                restorer.step(0.002)
    finally:
        restorer.close()


def test_a_restore_inside_the_callback_settles_the_collector_between_slices(
    kafka_settings: KafkaSettings, new_topic: NewTopic
) -> None:
    """Without ``background`` the worker's loop does not run until the whole restore is read, so the
    restorer itself must call the worker's settle after the slices it reads (to freeze what they
    restored), the last one after all the state is loaded."""
    changelog = new_topic(partitions=2, configs={"cleanup.policy": "compact"})
    write_state(kafka_settings, changelog, 0, 30_000)
    write_state(kafka_settings, changelog, 1, 5)
    counters = WorkerCounters()
    seen: list[int] = []
    restorer = StateRestorer(
        kafka_settings,
        f"g-{uuid.uuid4().hex[:6]}",
        counters,
        timeout=60,
        background=False,
        settle=lambda: seen.append(counters.restored_keys),
    )
    step = RestoredInto(changelog)
    window = cast(StatefulStep, step)
    try:
        held = restorer.begin([(("in", 0), [(window, 0)]), (("in", 1), [(window, 1)])])
    finally:
        restorer.close()
    assert held == [] and not restorer.restoring
    assert sorted(step.restored) == [0, 1]
    assert seen, "the collector was never settled during the restore"
    assert seen[-1] == 30_005, "the last settle came before the last state was loaded"
    assert seen == sorted(seen)
