"""Windowed counts through the real broker equal a brute-force computation, late records included.

One source partition, so the order records reach the window (through the repartition topic) is the
order they were produced in, and lateness is deterministic. Two pipelines (tumbling and hopping)
read the same source, which also checks that one consumer feeds every pipeline of a worker.
"""

from __future__ import annotations

import json
import math
import random
import uuid
from collections import Counter

import pytest
from pydantic import BaseModel

from cadenza.operators import Count, SessionWindows, SlidingWindows, WatermarkTracker, WindowedAggregation
from cadenza.pipelines import Hopping, Pipeline, Session, Sliding, Tumbling
from cadenza.settings import KafkaSettings
from cadenza.testing.pytest_plugin import NewTopic
from cadenza.worker import Worker
from cadenza.worker.dead_letter import OPERATOR_HEADER, WINDOW_END_HEADER, WINDOW_START_HEADER
from tests.worker.kafka_io import Record, produce, reading, running

pytestmark = pytest.mark.kafka

OUT_OF_ORDERNESS = 1.0
LATENESS = 1.0
FLUSH_USER = "~flush"

WindowKey = tuple[str, float, float]


class Click(BaseModel):
    user: str
    page: str
    ts: float


def tumbling_windows(ts: float, size: float) -> list[tuple[float, float]]:
    start = math.floor(ts / size) * size
    return [(start, start + size)]


def hopping_windows(ts: float, size: float, hop: float) -> list[tuple[float, float]]:
    return [
        (k * hop, k * hop + size)
        for k in range(math.floor((ts - size) / hop) - 1, math.floor(ts / hop) + 2)
        if k * hop <= ts < k * hop + size
    ]


def brute_force(
    events: list[tuple[str, float]], windows_of: object
) -> tuple[dict[WindowKey, int], Counter[WindowKey]]:
    """Counts of the windows that close, and (key, window) pairs of late records, the plain way:
    a record is late for a window when window end + lateness <= the watermark before it, and the
    watermark is the largest event time so far minus the out-of-orderness."""
    assert callable(windows_of)
    counts: Counter[WindowKey] = Counter()
    late: Counter[WindowKey] = Counter()
    watermark = -math.inf
    newest = -math.inf
    for user, ts in events:
        for start, end in windows_of(ts):
            if end + LATENESS <= watermark:
                late[(user, start, end)] += 1
            else:
                counts[(user, start, end)] += 1
        newest = max(newest, ts)
        watermark = max(watermark, newest - OUT_OF_ORDERNESS)
    closed = {key: n for key, n in counts.items() if key[2] + LATENESS <= watermark}
    return closed, late


def make_events(seed: int) -> list[tuple[str, float]]:
    """Mostly increasing times with jitter, some records seconds late, one health check to filter."""
    rng = random.Random(seed)
    events: list[tuple[str, float]] = []
    for i in range(400):
        base = i * 0.25
        if i % 37 == 5:
            ts = max(0.0, base - rng.choice([3.0, 4.5, 6.0]))  # late by seconds
        else:
            ts = max(0.0, base + rng.choice([-1.0, -0.5, -0.25, 0.0, 0.0, 0.25, 0.5]))
        events.append((f"u{rng.randrange(5)}", ts))
    return events


def click(user: str, ts: float, page: str = "/p") -> bytes:
    return json.dumps({"user": user, "page": page, "ts": ts}).encode()


def results(records: list[Record]) -> Counter[tuple[str, float, float, int]]:
    found: Counter[tuple[str, float, float, int]] = Counter()
    for record in records:
        value = json.loads(record.value or b"")
        assert record.key == value["key"].encode()
        found[(value["key"], value["window_start"], value["window_end"], value["value"])] += 1
    return found


def lates(records: list[Record]) -> Counter[WindowKey]:
    return Counter(
        ((r.key or b"").decode(), float(r.header(WINDOW_START_HEADER)), float(r.header(WINDOW_END_HEADER)))
        for r in records
    )


def test_tumbling_and_hopping_counts_match_brute_force_and_late_records_go_to_the_late_topic(
    kafka_settings: KafkaSettings, new_topic: NewTopic
) -> None:
    source = new_topic(partitions=1)
    tumbling_out, hopping_out = new_topic(), new_topic()
    suffix = uuid.uuid4().hex[:6]

    def declare(name: str, spec: Tumbling | Hopping, sink: str) -> Pipeline:
        pipeline = Pipeline(f"{name}-{suffix}", tenant="ads", latency_target="250ms")
        (
            pipeline.source(source, value=Click, timestamp="ts", max_out_of_orderness=OUT_OF_ORDERNESS)
            .filter(lambda c: c.page != "/health")
            .key_by(lambda c: c.user)
            .window(spec, allowed_lateness=LATENESS)
            .count()
            .sink(sink)
        )
        return pipeline

    tumbling = declare("tumbling", Tumbling("2s"), tumbling_out)
    hopping = declare("hopping", Hopping("4s", "2s"), hopping_out)
    events = make_events(seed=7)
    # A health check (filtered out) and a record far ahead that closes every other window.
    tail = [click("u1", 50.0, page="/health"), click(FLUSH_USER, 10_000.0)]
    seen = [*events, (FLUSH_USER, 10_000.0)]
    want_tumbling, late_tumbling = brute_force(seen, lambda ts: tumbling_windows(ts, 2.0))
    want_hopping, late_hopping = brute_force(seen, lambda ts: hopping_windows(ts, 4.0, 2.0))
    assert late_tumbling and late_hopping  # the input does exercise lateness
    assert not any(user == FLUSH_USER for user, _, _ in [*want_tumbling, *want_hopping])
    produce(kafka_settings, source, [(None, click(u, ts), 0) for u, ts in events[:200]])

    worker = Worker([tumbling, hopping], kafka_settings, group=f"g-{suffix}")
    with running(worker):
        topics = [tumbling_out, hopping_out, f"tumbling-{suffix}.late", f"hopping-{suffix}.late"]
        with reading(kafka_settings, topics) as reader:
            produce(kafka_settings, source, [(None, click(u, ts), 0) for u, ts in events[200:]])
            produce(kafka_settings, source, [(None, value, 0) for value in tail])
            reader.wait_for(
                lambda got: (
                    len(got[tumbling_out]) >= len(want_tumbling)
                    and len(got[hopping_out]) >= len(want_hopping)
                    and len(got[topics[2]]) >= sum(late_tumbling.values())
                    and len(got[topics[3]]) >= sum(late_hopping.values())
                ),
                timeout=40,
                what="every window result and late record",
            )
            reader.settle(1.0)
    for out, want in ((tumbling_out, want_tumbling), (hopping_out, want_hopping)):
        got = results(reader.records[out])
        assert all(n == 1 for n in got.values()), "a clean run emits each window once"
        assert set(got) == {(user, start, end, n) for (user, start, end), n in want.items()}
    assert lates(reader.records[topics[2]]) == late_tumbling
    assert lates(reader.records[topics[3]]) == late_hopping
    assert {r.header(OPERATOR_HEADER) for r in reader.records[topics[2]]} == {"4-count"}
    assert worker.counters.late == sum(late_tumbling.values()) + sum(late_hopping.values())
    assert worker.counters.window_results == len(want_tumbling) + len(want_hopping)


def reference(
    events: list[tuple[str, float]], assigner: SlidingWindows | SessionWindows
) -> tuple[set[tuple[str, float, float, int]], Counter[WindowKey]]:
    """What cadenza.operators computes for these events in this order (the operators have their own
    brute-force tests); the worker must reproduce it through the repartition topic and the changelog."""
    aggregation: WindowedAggregation[str, object, int, int] = WindowedAggregation(assigner, Count(), LATENESS)
    tracker = WatermarkTracker([0], max_out_of_orderness=OUT_OF_ORDERNESS)
    emitted: set[tuple[str, float, float, int]] = set()
    late: Counter[WindowKey] = Counter()
    for user, ts in events:
        for missed in aggregation.add(user, ts, None):
            late[(user, missed.window.start, missed.window.end)] += 1
        tracker.observe(0, ts)
        for result in aggregation.advance(tracker.watermark()):
            emitted.add((result.key, result.window.start, result.window.end, result.result))
    return emitted, late


def test_sliding_and_session_windows_match_the_operator_reference(
    kafka_settings: KafkaSettings, new_topic: NewTopic
) -> None:
    source = new_topic(partitions=1)
    sliding_out, session_out = new_topic(), new_topic()
    suffix = uuid.uuid4().hex[:6]
    pipelines = []
    for name, spec, sink in (
        ("sliding", Sliding("2s"), sliding_out),
        ("session", Session("1.5s"), session_out),
    ):
        pipeline = Pipeline(f"{name}-{suffix}", tenant="ads", latency_target="250ms")
        (
            pipeline.source(source, value=Click, timestamp="ts", max_out_of_orderness=OUT_OF_ORDERNESS)
            .key_by(lambda c: c.user)
            .window(spec, allowed_lateness=LATENESS)
            .count()
            .sink(sink)
        )
        pipelines.append(pipeline)
    rng = random.Random(11)
    events = [
        (f"u{rng.randrange(3)}", ts) for ts in sorted(rng.choice(range(0, 240)) * 0.25 for _ in range(150))
    ]
    events[40:40] = [("u0", 1.0), ("u1", 2.5)]  # late
    seen = [*events, (FLUSH_USER, 10_000.0)]
    want_sliding, late_sliding = reference(seen, SlidingWindows(2.0))
    want_session, late_session = reference(seen, SessionWindows(1.5))
    assert late_sliding and late_session
    produce(kafka_settings, source, [(None, click(u, ts), 0) for u, ts in seen])
    worker = Worker(pipelines, kafka_settings, group=f"g-{suffix}")
    late_topics = [f"sliding-{suffix}.late", f"session-{suffix}.late"]
    with running(worker), reading(kafka_settings, [sliding_out, session_out, *late_topics]) as reader:
        reader.wait_for(
            lambda got: (
                len(got[sliding_out]) >= len(want_sliding)
                and len(got[session_out]) >= len(want_session)
                and len(got[late_topics[0]]) >= sum(late_sliding.values())
                and len(got[late_topics[1]]) >= sum(late_session.values())
            ),
            timeout=40,
            what="every sliding and session result",
        )
        reader.settle(1.0)
    assert results(reader.records[sliding_out]) == Counter(want_sliding)
    assert results(reader.records[session_out]) == Counter(want_session)
    assert lates(reader.records[late_topics[0]]) == late_sliding
    assert lates(reader.records[late_topics[1]]) == late_session
