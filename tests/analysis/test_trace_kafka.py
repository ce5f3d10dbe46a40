"""Activity traces from real workers through the real broker, and what the analysis makes of them."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable

import pytest
from pydantic import BaseModel

from cadenza.analysis import Activity, top, window_summaries
from cadenza.analysis.trace import decode_batch
from cadenza.pipelines import Pipeline
from cadenza.settings import KafkaSettings
from cadenza.testing.pytest_plugin import NewTopic
from cadenza.worker import Worker
from cadenza.worker.config import WorkerConfig
from tests.worker.kafka_io import Reader, produce, reading, running

pytestmark = pytest.mark.kafka


class Item(BaseModel):
    id: int


def busy(seconds: float) -> Callable[[Item], Item]:
    """A map that keeps the CPU busy for ``seconds`` per record (a spin, not a sleep: it is work)."""

    def step(item: Item) -> Item:
        until = time.perf_counter() + seconds
        while time.perf_counter() < until:
            pass
        return item

    return step


def items(n: int, partition: int | None = None) -> list[tuple[bytes | None, bytes | None, int | None]]:
    return [(str(i).encode(), json.dumps({"id": i}).encode(), partition) for i in range(n)]


def trace_of(reader: Reader, topic: str) -> list[Activity]:
    return [a for r in reader.records[topic] for a in decode_batch(r.value or b"")]


def longest_unbroken(trace: list[Activity], worker: str, lo: float, hi: float) -> tuple[float, float]:
    """The longest part of ``[lo, hi]`` that no ``waiting`` activity of ``worker`` overlaps."""
    waits = sorted(
        (a.start, a.end)
        for a in trace
        if a.worker == worker and a.kind == "waiting" and a.end > lo and a.start < hi
    )
    best, cursor = (lo, lo), lo
    for start, end in [*waits, (hi, hi)]:
        if start - cursor > best[1] - best[0]:
            best = (cursor, start)
        cursor = max(cursor, end)
    return best


@pytest.mark.slow("two worker processes in one group, one slowed, long enough to rank")
def test_a_slowed_worker_ranks_first_among_stragglers(
    kafka_settings: KafkaSettings, new_topic: NewTopic
) -> None:
    source, sink, activities = new_topic(partitions=2), new_topic(partitions=2), new_topic()
    name, group = f"strag-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:8]}"

    def pipeline(delay: float) -> Pipeline:
        p = Pipeline(name, tenant="t", latency_target="1s")
        p.source(source, value=Item).map(busy(delay)).sink(sink)
        return p

    slow = Worker(
        [pipeline(0.004)],
        kafka_settings,
        WorkerConfig(group=group, worker_id="slow", activities_topic=activities),
    )
    fast = Worker(
        [pipeline(0.0)],
        kafka_settings,
        WorkerConfig(group=group, worker_id="fast", activities_topic=activities),
    )
    per_partition = 400
    with reading(kafka_settings, [sink]) as reader, running(slow), running(fast):
        deadline = time.monotonic() + 60
        while not (len(slow.assignment) == 1 and len(fast.assignment) == 1):
            assert time.monotonic() < deadline, "the two workers did not split the partitions"
            time.sleep(0.1)
        produce(kafka_settings, source, items(per_partition, 0) + items(per_partition, 1))
        reader.wait_for(lambda got: len(got[sink]) >= 2 * per_partition, timeout=60, what="all outputs")
    with reading(kafka_settings, [activities]) as late:  # what the workers sent at close
        late.wait_for(
            lambda got: {a.worker for a in trace_of(late, activities)} >= {"slow", "fast"}, 30, "traces"
        )
        late.settle(1.0)
        trace = trace_of(late, activities)
    kinds = {a.kind for a in trace}
    assert {"processing", "waiting"} <= kinds
    # Windows of 0.25 s in the slow worker's longest second of work without a wait (a wait cuts every
    # path through a timeline; an idle worker takes the first record that comes, so it may wait
    # again after it).
    slow_runs = [a for a in trace if a.worker == "slow" and a.kind == "processing"]
    begin, end = longest_unbroken(
        trace, "slow", min(a.start for a in slow_runs), max(a.end for a in slow_runs)
    )
    assert end - begin >= 1.0, f"the slow worker never worked a whole second without a wait: {begin}-{end}"
    summaries = window_summaries(trace, begin, begin + 1.0, 0.25, workers=["slow", "fast"])
    assert summaries
    for s in summaries:
        assert top(s.by_worker, 1)[0][0] == "slow", s.by_worker


def test_a_cpu_heavy_operator_ranks_first(kafka_settings: KafkaSettings, new_topic: NewTopic) -> None:
    heavy_in, light_in, sink, activities = new_topic(), new_topic(), new_topic(), new_topic()
    heavy = Pipeline(f"heavy-{uuid.uuid4().hex[:6]}", tenant="t", latency_target="1s")
    heavy.source(heavy_in, value=Item).map(busy(0.003)).sink(sink)
    light = Pipeline(f"light-{uuid.uuid4().hex[:6]}", tenant="t", latency_target="1s")
    light.source(light_in, value=Item).map(busy(0.0)).sink(sink)
    worker = Worker(
        [heavy, light],
        kafka_settings,
        WorkerConfig(group=f"g-{uuid.uuid4().hex[:8]}", activities_topic=activities),
    )
    n = 300
    # A backlog: the worker finds every record there when it starts, so it seldom waits between runs.
    started = time.time()
    produce(kafka_settings, light_in, items(n))
    produce(kafka_settings, heavy_in, items(n))
    with reading(kafka_settings, [sink]) as reader, running(worker):
        reader.wait_for(lambda got: len(got[sink]) >= 2 * n, timeout=60, what="all outputs")
        finished = time.time()
    with reading(kafka_settings, [activities]) as late:
        late.wait_for(lambda got: bool(got[activities]), 30, "the trace")
        late.settle(1.0)
        trace = trace_of(late, activities)
    # The longest stretch of the heavy operator's runs in which the worker never waited: a wait cuts
    # the only timeline's every path, and even on a backlog the worker may wait for the broker's next
    # fetch response when it has run through what the last one brought.
    runs = [a for a in trace if a.kind == "processing" and (a.operator or "").startswith(heavy.name + "/")]
    first_run, last_run = min(a.start for a in runs), max(a.end for a in runs)
    assert started < first_run < last_run < finished
    (worker_id,) = {a.worker for a in runs}
    begin, end = longest_unbroken(trace, worker_id, first_run, last_run)
    assert end - begin >= 0.1, f"no 100 ms of the heavy runs without a wait: {begin}-{end}"
    (summary,) = window_summaries(trace, begin, end, end - begin)
    (first, share), *_ = top(summary.by_operator)
    assert first.startswith(heavy.name + "/"), summary.by_operator
    assert share > 0.5


@pytest.mark.slow("two worker processes in one group hand records over a topic")
def test_records_handed_between_workers_become_message_edges(
    kafka_settings: KafkaSettings, new_topic: NewTopic
) -> None:
    source, sink, activities = new_topic(partitions=2), new_topic(partitions=2), new_topic()
    name, group = f"hop-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:8]}"

    def pipeline() -> Pipeline:
        p = Pipeline(name, tenant="t", latency_target="1s")
        p.source(source, value=Item).key_by(lambda item: item.id % 5).map(busy(0.0005)).sink(sink)
        return p

    one = Worker(
        [pipeline()],
        kafka_settings,
        WorkerConfig(group=group, worker_id="one", activities_topic=activities, partitions=2),
    )
    two = Worker(
        [pipeline()],
        kafka_settings,
        WorkerConfig(group=group, worker_id="two", activities_topic=activities, partitions=2),
    )
    n = 400
    with reading(kafka_settings, [sink]) as reader, running(one), running(two):
        deadline = time.monotonic() + 60
        while not (one.assignment and two.assignment and len(one.assignment | two.assignment) == 4):
            assert time.monotonic() < deadline, "the two workers did not split the partitions"
            time.sleep(0.1)
        produce(kafka_settings, source, items(n // 2, 0) + items(n // 2, 1))
        reader.wait_for(lambda got: len(got[sink]) >= n, timeout=60, what="all outputs")
    with reading(kafka_settings, [activities]) as late:
        late.wait_for(
            lambda got: {a.worker for a in trace_of(late, activities)} >= {"one", "two"}, 30, "traces"
        )
        late.settle(1.0)
        trace = trace_of(late, activities)
    messages = [a for a in trace if a.kind == "message"]
    # Only the repartition topic's records carry the header (the source's were written by the test).
    assert messages and all(a.topic is not None and a.topic != source for a in messages)
    assert {(a.worker, a.to_worker) for a in messages} & {("one", "two"), ("two", "one")}
    assert all(0.0 <= a.end - a.start < 30.0 for a in messages)
    # The window of the slowest hop between the two workers, from its send to its arrival: the hop
    # is a path across it, whatever the two workers did (or waited for) meanwhile.
    hop = max((a for a in messages if a.worker != a.to_worker), key=lambda a: a.end - a.start)
    assert hop.end > hop.start
    (summary,) = window_summaries(trace, hop.start, hop.end, hop.end - hop.start)
    assert summary.paths > 0
    channel = next(c for c in summary.by_channel if c.startswith(f"{hop.worker} -> {hop.to_worker} "))
    assert summary.by_channel[channel] > 0, summary.by_channel
