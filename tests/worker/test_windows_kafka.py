"""Windowed counts through the real broker equal a brute-force computation, late records included.

One source partition, so the order records reach the window (through the repartition topic) is the
order they were produced in, and lateness is deterministic. Two pipelines (tumbling and hopping, then
sliding and session) read the same source, which also checks that one consumer feeds every pipeline
of a worker. Every expected result is computed the plain way, by scanning the records, not with
cadenza's operators.
"""

from __future__ import annotations

import json
import math
import random
import uuid
from collections import Counter

import pytest
from pydantic import BaseModel

from cadenza.pipelines import Hopping, Pipeline, Session, Sliding, Tumbling
from cadenza.settings import KafkaSettings
from cadenza.testing.pytest_plugin import NewTopic
from cadenza.worker import Worker
from cadenza.worker.config import WorkerConfig
from cadenza.worker.engine.dead_letter import OPERATOR_HEADER, WINDOW_END_HEADER, WINDOW_START_HEADER
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

    worker = Worker([tumbling, hopping], kafka_settings, WorkerConfig(group=f"g-{suffix}"))
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


def watermarks_before(events: list[tuple[str, float]]) -> list[float]:
    """The watermark each record meets: the largest event time before it minus the out-of-orderness."""
    out: list[float] = []
    watermark = newest = -math.inf
    for _, ts in events:
        out.append(watermark)
        newest = max(newest, ts)
        watermark = max(watermark, newest - OUT_OF_ORDERNESS)
    return out


def brute_force_sliding(
    events: list[tuple[str, float]], size: float
) -> tuple[set[tuple[str, float, float, int]], Counter[WindowKey]]:
    """Record-anchored sliding windows ``[t - size, t]`` the plain way, by scanning every record.

    A record whose own window is closed on arrival (``t + lateness <= watermark``) is late and opens
    no window; the first on-time record at ``t`` opens window ``t``. A record at ``x`` counts in window
    ``t`` when ``t - size <= x <= t`` and it arrived before that window opened (then it was still
    buffered), opened it, or arrived while the window was still open (``t + lateness > watermark``).
    """
    marks = watermarks_before(events)
    late: Counter[WindowKey] = Counter()
    opener: dict[tuple[str, float], int] = {}
    for index, ((user, ts), watermark) in enumerate(zip(events, marks, strict=True)):
        if ts + LATENESS <= watermark:
            late[(user, ts - size, ts)] += 1
        elif (user, ts) not in opener:
            opener[(user, ts)] = index
    emitted: set[tuple[str, float, float, int]] = set()
    for (user, end), first in opener.items():
        count = 0
        for index, ((other, ts), watermark) in enumerate(zip(events, marks, strict=True)):
            if other != user or not end - size <= ts <= end:
                continue
            if index <= first or end + LATENESS > watermark:
                count += 1
        emitted.add((user, end - size, end, count))
    return emitted, late


def brute_force_session(
    events: list[tuple[str, float]], gap: float
) -> tuple[set[tuple[str, float, float, int]], Counter[WindowKey]]:
    """Sessions the plain way: on-time records of a key, sorted, split where neighbours are more than
    ``gap`` apart; a session ``[first, last + gap)``. A record is late when ``t + lateness <=
    watermark``; no on-time record can touch a session that already closed, so none is split or
    reopened by arrival order."""
    marks = watermarks_before(events)
    late: Counter[WindowKey] = Counter()
    times: dict[str, list[float]] = {}
    for (user, ts), watermark in zip(events, marks, strict=True):
        if ts + LATENESS <= watermark:
            late[(user, ts, ts + gap)] += 1
        else:
            times.setdefault(user, []).append(ts)
    emitted: set[tuple[str, float, float, int]] = set()
    for user, found in times.items():
        found.sort()
        start = previous = found[0]
        count = 0
        for ts in found:
            if ts - previous > gap:
                emitted.add((user, start, previous + gap, count))
                start, count = ts, 0
            count += 1
            previous = ts
        emitted.add((user, start, previous + gap, count))
    return emitted, late


def test_sliding_and_session_windows_match_brute_force_with_out_of_order_and_late_records(
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
    events = make_events(seed=11)  # jittered (out of order) times, some records seconds late
    seen = [*events, (FLUSH_USER, 10_000.0)]
    want_sliding, late_sliding = brute_force_sliding(seen, 2.0)
    want_session, late_session = brute_force_session(seen, 1.5)
    assert late_sliding and late_session  # the input does exercise lateness
    assert any(ts < max(t for _, t in events[:i]) for i, (_, ts) in enumerate(events) if i)  # and disorder
    want_sliding = {w for w in want_sliding if w[0] != FLUSH_USER}
    want_session = {w for w in want_session if w[0] != FLUSH_USER}
    produce(kafka_settings, source, [(None, click(u, ts), 0) for u, ts in seen])
    worker = Worker(pipelines, kafka_settings, WorkerConfig(group=f"g-{suffix}"))
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
