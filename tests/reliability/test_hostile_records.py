"""Issue 15, findings 1-3: no record and no user function may stop a worker.

Each finding stopped every pipeline of a worker before the fix (and, on restart, again: a crash loop):

1. a filter (and a branch predicate) returning an object that cannot be truth-tested, as a numpy array;
2. an event time in milliseconds on the first record of a partition, in the tutorial's shape
   (``key_by`` -> tumbling window), which failed the ``key_by``'s context stamp;
3. user code calling ``sys.exit(3)`` or raising a ``BaseException`` subclass.

Here all of them run in one worker beside a steady pipeline: each bad record is dead-lettered once at
the step that failed, with the reason, and every other record of every pipeline gets its result.
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from typing import cast

import pytest
from pydantic import BaseModel

from cadenza import Pipeline, Tumbling
from cadenza.scheduling.context import CONTEXT_HEADER, SchedulingContext, decode_context, encode_context
from cadenza.schemas import ERROR_HEADER, ERROR_TYPE_HEADER
from cadenza.settings import KafkaSettings
from cadenza.testing.pytest_plugin import NewTopic
from cadenza.worker import Worker
from cadenza.worker.config import WorkerConfig
from cadenza.worker.engine.dead_letter import OPERATOR_HEADER
from tests.reliability._support import group, produce_with_headers, quick
from tests.worker.kafka_io import Record, produce, reading, running

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(120)]

RECORDS = 80


class Event(BaseModel):
    id: int
    user: str = "u"
    ts: float = 0.0


class Ambiguous:
    """What a numpy array does when truth-tested: refuses."""

    def __bool__(self) -> bool:
        raise ValueError("The truth value of an array with more than one element is ambiguous")


class Halt(BaseException):
    """A user's own BaseException subclass (not an Exception)."""


def admit(event: Event) -> bool:
    return cast(bool, Ambiguous()) if event.id % 5 == 1 else True


def small(event: Event) -> bool:
    return cast(bool, Ambiguous()) if event.id % 5 == 2 else event.id % 2 == 0


def price(event: Event) -> dict[str, int]:
    if event.id % 5 == 3:
        sys.exit(3)
    if event.id % 5 == 4:
        raise Halt(f"halt at {event.id}")
    return {"id": event.id}


def test_untestable_results_exits_and_millisecond_event_times_are_dead_lettered_and_nothing_stops(
    kafka_settings: KafkaSettings, new_topic: NewTopic
) -> None:
    settings = quick(kafka_settings)
    hostile_in, even_out, odd_out = new_topic(partitions=2), new_topic(partitions=2), new_topic(partitions=2)
    window_in, window_out = new_topic(partitions=1), new_topic(partitions=2)
    steady_in, steady_out = new_topic(partitions=1), new_topic(partitions=1)
    suffix = uuid.uuid4().hex[:6]

    hostile = Pipeline(f"hostile-{suffix}", tenant="A", latency_target="5s")
    even, odd = hostile.source(hostile_in, value=Event).filter(admit).branch(small, lambda e: True)
    even.map(price).sink(even_out)
    odd.map(lambda e: {"id": e.id}).sink(odd_out)

    millis = Pipeline(f"millis-{suffix}", tenant="A", latency_target="5s")
    (
        millis.source(window_in, value=Event, timestamp="ts")
        .key_by(lambda e: e.user)
        .window(Tumbling("1s"))
        .count()
        .sink(window_out)
    )
    steady = Pipeline(f"steady-{suffix}", tenant="B", latency_target="1s")
    steady.source(steady_in, value=Event).map(lambda e: {"id": e.id}).sink(steady_out)
    steps = {n.id: n.kind for n in hostile.compile().nodes}
    filter_step, branch_step, map_step = "2-filter", "3-branch", "4-map"
    assert [steps[s] for s in (filter_step, branch_step, map_step)] == ["filter", "branch", "map"], steps

    now = time.time()
    # The first records of the partition are in milliseconds (the finding's shape); later ones are
    # seconds, spread over a few windows, then one per key far ahead that closes them. One partition,
    # so that no record is late and every closed window's count is exact.
    window_records = [Event(id=i, user=f"u{i % 3}", ts=(now - 10) * 1000.0) for i in range(2)]  # not seconds
    window_records += [Event(id=10 + i, user=f"u{i % 3}", ts=now - 10 + i * 0.1) for i in range(30)]
    window_records += [Event(id=99, user=f"u{k}", ts=now + 60) for k in range(3)]

    def closed(results: list[Record]) -> int:
        """Records counted in the windows that closed (the last count of each window)."""
        last: dict[tuple[str, float], int] = {}
        for result in results:
            row = json.loads(result.value or b"")
            if row["window_end"] <= now:
                last[row["key"], row["window_start"]] = row["value"]
        return sum(last.values())

    worker = Worker([hostile, millis, steady], settings, WorkerConfig(group=group(), partitions=2))
    hostile_dead, millis_dead = f"hostile-{suffix}.dlq", f"millis-{suffix}.dlq"
    topics = [even_out, odd_out, window_out, steady_out, hostile_dead, millis_dead]
    with running(worker), reading(settings, topics) as reader:
        produce(
            settings,
            window_in,
            [(None, e.model_dump_json().encode(), 0) for e in window_records],
        )
        produce(
            settings,
            hostile_in,
            [(None, Event(id=i).model_dump_json().encode(), None) for i in range(RECORDS)],
        )
        produce(
            settings,
            steady_in,
            [(None, Event(id=i).model_dump_json().encode(), None) for i in range(RECORDS)],
        )
        failing = [i for i in range(RECORDS) if i % 5 in (1, 2) or (i % 5 in (3, 4) and i % 2 == 0)]
        reader.wait_for(
            lambda got: (
                len(got[hostile_dead]) >= len(failing)
                and len(got[millis_dead]) >= 2
                and len(got[steady_out]) >= RECORDS
                and closed(got[window_out]) >= 30
            ),
            timeout=60,
            what="every dead letter and the steady results",
        )
        reader.settle(1.0)
        assert worker.counters.dead_letter_function == len(failing)

    def ids(topic: str) -> list[int]:
        return sorted(json.loads(r.value or b"")["id"] for r in reader.records[topic])

    # Finding 1 and 3: each bad record dead-lettered once, at the step that failed, with the reason.
    letters = {Event.model_validate_json(r.value or b"").id: r for r in reader.records[hostile_dead]}
    assert len(letters) == len(reader.records[hostile_dead]) == len(failing)
    assert sorted(letters) == failing
    for i, record in letters.items():
        expected = {1: (filter_step, "ValueError"), 2: (branch_step, "ValueError")}.get(
            i % 5, (map_step, "SystemExit" if i % 5 == 3 else "Halt")
        )
        assert (record.header(OPERATOR_HEADER), record.header(ERROR_TYPE_HEADER)) == expected
    assert "ambiguous" in letters[1].header(ERROR_HEADER)
    # ...and every other record went through.
    assert ids(odd_out) == [i for i in range(RECORDS) if i % 5 not in (1, 2) and i % 2 == 1]
    assert ids(even_out) == [i for i in range(RECORDS) if i % 5 in (0,) and i % 2 == 0]
    assert ids(steady_out) == list(range(RECORDS))

    # Finding 2: the millisecond records dead-lettered at the source with the likely cause; the
    # windows of the others counted exactly.
    millis_letters = reader.records[millis_dead]
    assert sorted(Event.model_validate_json(r.value or b"").id for r in millis_letters) == [0, 1]
    for record in millis_letters:
        assert "did you send milliseconds?" in record.header(ERROR_HEADER)
    assert closed(reader.records[window_out]) == 30


def test_a_producer_cannot_choose_its_records_priority_with_a_cadenza_ctx_header(
    kafka_settings: KafkaSettings, new_topic: NewTopic
) -> None:
    """Finding 6: a tenant that wrote a valid ``cadenza-ctx`` (t_F = 0, L = 0, naming the pipeline
    that reads it) on its own source records jumped the queue. Now the source context is fresh (its
    trace id kept) and the rejection is counted; only a source declared ``trusted_context=True``
    keeps it."""
    settings = quick(kafka_settings)
    plain_in, plain_out = new_topic(partitions=1), new_topic(partitions=1)
    trusted_in, trusted_out = new_topic(partitions=1), new_topic(partitions=1)
    suffix = uuid.uuid4().hex[:6]
    plain = Pipeline(f"plain-{suffix}", tenant="A", latency_target="2s")
    plain.source(plain_in).map(lambda v: v).sink(plain_out)
    trusted = Pipeline(f"trusted-{suffix}", tenant="A", latency_target="2s")
    trusted.source(trusted_in, trusted_context=True).map(lambda v: v).sink(trusted_out)

    def forged(pipeline: str, trace: int) -> bytes:
        return encode_context(SchedulingContext(pipeline, "A", 0.0, 0.0, 0.0, 0.0, 0, trace))

    worker = Worker([plain, trusted], settings, WorkerConfig(group=group()))
    with running(worker), reading(settings, [plain_out, trusted_out]) as reader:
        sent = time.time()
        produce_with_headers(
            settings,
            plain_in,
            [(None, b'{"n": 1}', 0, [(CONTEXT_HEADER, forged(plain.name, 7 + n))]) for n in range(5)],
        )
        produce_with_headers(
            settings, trusted_in, [(None, b'{"n": 1}', 0, [(CONTEXT_HEADER, forged(trusted.name, 70))])]
        )
        reader.wait_for(
            lambda got: len(got[plain_out]) >= 5 and len(got[trusted_out]) >= 1, timeout=30, what="results"
        )
    for n, record in enumerate(reader.records[plain_out]):
        ctx = decode_context(record.headers.get(CONTEXT_HEADER) or b"")
        assert ctx is not None
        assert ctx.frontier_time >= sent - 1.0 and ctx.latency_target == 2.0  # its own, not the claim
        assert ctx.trace_id == 7 + n
    kept = decode_context(reader.records[trusted_out][0].headers.get(CONTEXT_HEADER) or b"")
    assert kept is not None and (kept.frontier_time, kept.latency_target, kept.trace_id) == (0.0, 0.0, 70)
    rejected = {name: 0 for name in (plain.name, trusted.name)}
    for metrics in worker.exporter.operators():
        rejected[metrics.labels[1]] += metrics.context_rejected
    assert rejected[plain.name] == 5 and rejected[trusted.name] == 0
