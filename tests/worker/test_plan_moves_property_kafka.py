"""Plan moves as a property through the real broker: whatever the owners and strategy of each move,
the window counts equal a brute force over what was sent, and after each step every partition is run
by exactly the worker the plan names.

Three workers in plan ownership run for the whole test; hypothesis draws one or two migration steps
per example (any owner for each partition, strategy ``all``, ``fluid`` or ``matching``), while input
keeps arriving. Each example counts in a window of its own, closed by a record per partition after
its moves, so examples are checked one by one. Examples cost seconds each: few, and no shrinking.
"""

from __future__ import annotations

import itertools
import json
import uuid
from collections import Counter
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from cadenza.pipelines import Pipeline, Tumbling
from cadenza.scaling.handover import PlanMover
from cadenza.scaling.migration import STRATEGIES
from cadenza.settings import KafkaSettings
from cadenza.testing.pytest_plugin import NewTopic
from cadenza.worker import Worker
from cadenza.worker.config import WorkerConfig
from tests.worker.kafka_io import Reader, produce, reading, running
from tests.worker.test_plan_ownership_kafka import PARTITIONS, Reading, encoded, feed_during, wait

pytestmark = [
    pytest.mark.kafka,
    pytest.mark.slow(
        "hypothesis moves partitions between two running workers; each move waits for a warm copy"
    ),
]

WORKERS = ("w1", "w2", "w3")
#: Event-time spacing of the examples' windows: each example's window closes (at its flush record,
#: ``FLUSH_AFTER`` later) long before the next example's records arrive.
WINDOW_GAP = 1000.0
FLUSH_AFTER = 500.0
OUT_OF_ORDERNESS = 10.0
KEYS = 120

Owners = tuple[str, str, str, str]
Move = tuple[Owners, str]
Pool = tuple[PlanMover, dict[str, Worker], str, str]

moves = st.lists(
    st.tuples(st.tuples(*[st.sampled_from(WORKERS)] * PARTITIONS), st.sampled_from(STRATEGIES)),
    min_size=1,
    max_size=2,
)


def window_counts(reader: Reader, topic: str, start: float) -> dict[str, list[int]]:
    found: dict[str, list[int]] = {}
    for record in reader.records[topic]:
        value = json.loads(record.value or b"")
        if value["window_start"] == start:
            found.setdefault(value["key"], []).append(value["value"])
    return found


@pytest.fixture
def pool(
    kafka_settings: KafkaSettings, new_topic: NewTopic
) -> Iterator[tuple[PlanMover, dict[str, Worker], str, str]]:
    source, sink = new_topic(PARTITIONS), new_topic()
    pipeline = Pipeline(f"moves-{uuid.uuid4().hex[:6]}", tenant="a", latency_target="1s")
    (
        pipeline.source(source, value=Reading, key=str, timestamp="ts", max_out_of_orderness=OUT_OF_ORDERNESS)
        .window(Tumbling("1s"))
        .count()
        .sink(sink)
    )
    group = f"g-{uuid.uuid4().hex[:8]}"
    mover = PlanMover(kafka_settings, group, step_timeout=90.0)
    workers = {
        name: Worker([pipeline], kafka_settings, WorkerConfig(group=group, ownership="plan", worker_id=name))
        for name in WORKERS
    }
    try:
        mover.place({(source, p): "w1" for p in range(PARTITIONS)})
        with (
            running(workers["w1"], join_timeout=None),
            running(workers["w2"], join_timeout=None),
            running(workers["w3"], join_timeout=None),
        ):
            yield mover, workers, source, sink
    finally:
        mover.close()


def test_window_counts_and_ownership_follow_the_plan_through_any_moves(
    kafka_settings: KafkaSettings, pool: Pool
) -> None:
    mover, workers, source, sink = pool
    windows = itertools.count(1)

    @settings(
        max_examples=4,
        deadline=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(steps=moves)
    @example(
        steps=[(("w2", "w3", "w1", "w2"), "fluid"), (("w3", "w2", "w2", "w1"), "matching")]
    )  # chain, swap
    @example(steps=[(("w2", "w2", "w2", "w2"), "all"), (("w1", "w1", "w1", "w1"), "fluid")])  # there and back
    def moves_keep_counts_exact(steps: list[Move]) -> None:
        start = next(windows) * WINDOW_GAP
        before = [(f"k{i}", start + (i % 100) / 100.0) for i in range(KEYS)]
        during = [(f"k{i}", start + 0.5) for i in range(0, KEYS, 3)]
        produce(kafka_settings, source, encoded(before))
        fed = feed_during(kafka_settings, source, during, 10)  # input keeps arriving during the moves
        for owners, strategy in steps:
            target = {(source, p): owner for p, owner in enumerate(owners)}
            mover.migrate(target, strategy)
            for name, worker in workers.items():
                planned = {partition for partition, owner in target.items() if owner == name}
                wait(lambda w=worker, want=planned: w.assignment == want, 60, f"{name} to run {planned}")
        assert fed(60), "the input feeder did not finish"
        produce(kafka_settings, source, encoded([(f"k{p}", start + FLUSH_AFTER) for p in range(PARTITIONS)]))
        want = Counter(key for key, _ in [*before, *during])
        with reading(kafka_settings, [sink]) as reader:
            reader.wait_for(
                lambda _: len(window_counts(reader, sink, start)) >= len(want), 90, f"the counts of {steps}"
            )
            reader.settle(0.5)
            assert window_counts(reader, sink, start) == {key: [n] for key, n in want.items()}, steps

    moves_keep_counts_exact()  # the explicit examples: a chain then a swap; a move there and back
    assert sum(worker.counters.warm_installs for worker in workers.values()) > 0, "no move was warm"
