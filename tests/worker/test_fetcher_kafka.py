"""The fetcher's assignment through a real group: asked of the client only after the rebalance
handler saw a change, and always the client's own assignment when the flow control uses it.

Two consumers share a four-partition topic in one group: the first has it all, then the second
joins and takes half (a cooperative rebalance, the callbacks inside ``consume``), then leaves and
the first gets everything back; last, a partition leaves as the ownership plan releases one (no
assignment callback after it). Rounds as the worker's: fetch, then the flow control.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from pydantic import BaseModel

from cadenza.infra.kafka.clients import make_consumer, make_producer
from cadenza.pipelines import Pipeline
from cadenza.settings import KafkaSettings
from cadenza.testing.pytest_plugin import NewTopic
from cadenza.worker import Worker
from cadenza.worker.config import WorkerConfig
from cadenza.worker.engine.counters import WorkerCounters
from cadenza.worker.kafka.fetcher import Fetcher, FlowControl
from cadenza.worker.kafka.rebalance import Rebalance

pytestmark = pytest.mark.kafka


class CountingConsumer:
    """The real consumer, counting how often its assignment is asked for."""

    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer
        self.asked = 0

    def assignment(self) -> list[TopicPartition]:
        self.asked += 1
        return self.consumer.assignment()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.consumer, name)


def keys(partitions: list[TopicPartition]) -> list[tuple[str, int]]:
    return sorted((tp.topic, tp.partition) for tp in partitions)


def waited(fetcher: Fetcher) -> bool:
    """Read through a call, so that a type checker does not carry an earlier assertion over."""
    return fetcher.waited


@pytest.mark.slow("two consumers join one group, then one leaves: three rebalances")
def test_the_assignment_is_asked_for_only_after_a_change_and_is_the_clients(
    kafka_settings: KafkaSettings, new_topic: NewTopic
) -> None:
    topic = new_topic(partitions=4)
    producer, _ = make_producer(kafka_settings)
    for i in range(40):
        producer.produce(topic, f"r{i}".encode(), partition=i % 4)
    producer.flush(10)
    group = f"g-{uuid.uuid4().hex[:8]}"
    rebalance = Rebalance(lambda partitions: [], lambda: None, lambda partitions: 0)
    first, _ = make_consumer(kafka_settings, group)
    counted = CountingConsumer(first)
    first.subscribe(
        [topic], on_assign=rebalance.on_assign, on_revoke=rebalance.on_revoke, on_lost=rebalance.on_lost
    )
    fetcher = Fetcher(
        [(counted, [topic])],  # type: ignore[list-item]
        FlowControl(1000),
        WorkerCounters(),
        batch_size=100,
        poll_timeout=0.1,
        assignment_changes=lambda: rebalance.changes,
    )
    rounds = 0

    def round_() -> None:
        nonlocal rounds
        fetcher.fetch(0, False)
        fetcher.regulate(0, lambda topic, partition: 0, (), False)
        rounds += 1
        assert keys(fetcher.assignment()) == keys(first.assignment())

    def until(owned: int, other: Consumer | None = None) -> None:
        deadline = time.monotonic() + 60
        while len(first.assignment()) != owned or rebalance.changes == 0:
            assert time.monotonic() < deadline, f"never owned {owned} partitions"
            round_()
            if other is not None:
                other.consume(10, 0.05)

    second: Consumer | None = None
    try:
        until(4)
        before, changes = counted.asked, rebalance.changes
        for _ in range(50):  # nothing changes: the client is not asked again
            round_()
        assert counted.asked - before <= 1  # at most the refresh of a change just seen
        assert rebalance.changes == changes
        # The 40 records were read in those rounds: an empty buffer waits, a busy one never does.
        assert fetcher.fetch(0, False) == [] and waited(fetcher)
        assert fetcher.fetch(5, False) == [] and not waited(fetcher)
        assert fetcher.fetch(0, False, block=False) == [] and not waited(fetcher)
        second, _ = make_consumer(kafka_settings, group)
        second.subscribe([topic])
        until(2, second)
        for _ in range(10):
            round_()
            second.consume(10, 0.05)
        second.close()
        second = None
        until(4)
        for _ in range(10):
            round_()
        # As the ownership plan releases a partition: a revoke and an unassign, no assignment after.
        leaving = [TopicPartition(topic, 3)]
        rebalance.on_revoke(first, leaving)
        first.incremental_unassign(leaving)
        for _ in range(5):
            round_()
        assert len(fetcher.assignment()) == 3
    finally:
        if second is not None:
            second.close()
        first.close()
    # Asked once per change the handler saw (and once at the start), not once per round.
    assert counted.asked <= rebalance.changes + 1 < rounds


@pytest.mark.parametrize("lanes", [1, 2])
def test_a_wait_ended_by_a_record_also_takes_the_records_that_came_with_it(
    kafka_settings: KafkaSettings, new_topic: NewTopic, lanes: int
) -> None:
    """Ten records produced in one batch reach the client in one fetch response: the wait that the
    first of them ends returns all ten, in offset order, not one record a round."""
    topics = [new_topic(partitions=1) for _ in range(lanes)]
    consumers = []
    for topic in topics:
        consumer, _ = make_consumer(kafka_settings, f"g-{uuid.uuid4().hex[:8]}")
        consumer.assign([TopicPartition(topic, 0, 0)])
        consumers.append((consumer, [topic]))
    fetcher = Fetcher(
        consumers,
        FlowControl(1000, lanes=lanes),
        WorkerCounters(),
        batch_size=100,
        poll_timeout=10.0,
        assignment_changes=lambda: 0,
    )

    def produce_later() -> None:  # while the fetch below waits
        time.sleep(1.0)
        producer, _ = make_producer(kafka_settings, **{"linger.ms": 50})
        for i in range(10):
            producer.produce(topics[-1], f"r{i}".encode(), partition=0)
        producer.flush(10)

    try:
        for consumer, _ in consumers:  # joined and positioned before the records come
            assert consumer.consume(1, 0.5) == []
        sender = threading.Thread(target=produce_later)
        sender.start()
        messages = fetcher.fetch(0, False)
        sender.join()
        assert waited(fetcher)
        assert [m.offset() for m in messages] == list(range(10))
    finally:
        for consumer, _ in consumers:
            consumer.close()


def test_the_worker_pauses_at_shares_only_when_its_topics_have_different_targets(
    kafka_settings: KafkaSettings,
) -> None:
    """A worker pauses a partition at its share of the buffer only when its topics are read with
    different latency targets; its flow control is built with its membership, when it starts."""

    class Item(BaseModel):
        n: int

    suffix = uuid.uuid4().hex[:8]

    def pipeline(name: str, target: str) -> Pipeline:
        p = Pipeline(f"{name}-{suffix}", tenant=name, latency_target=target)
        p.source(f"{name}-in-{suffix}", value=Item).sink(f"{name}-out-{suffix}")
        return p

    cases = [
        ([pipeline("a", "1s"), pipeline("b", "1s")], False),
        ([pipeline("c", "250ms"), pipeline("d", "5s")], True),
    ]
    for index, (pipelines, shares) in enumerate(cases):
        worker = Worker(
            pipelines, kafka_settings, WorkerConfig(group=f"g-shares-{index}-{suffix}", partitions=1)
        )
        worker.start()
        try:
            assert worker.membership.flow.shares is shares
        finally:
            worker.close()
