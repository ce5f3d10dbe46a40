"""The worker's admission of a fetched batch, against what admitting record by record means.

Admission queues a batch's records a run at a time once the batch is decoded, and lets a source
record share the context of the record before it in its partition when both have no headers and the
same Kafka timestamp (see :mod:`cadenza.worker.engine.admission`). Checked here on random batches (seeded,
several per test) through a started worker on the real broker; the records are built in memory so
that timestamps, headers and the interleaving of partitions can be chosen: every record is queued
once, in offset order per operator-partition; contexts are shared exactly where the rule says and
nowhere else; every record keeps a trace id of its own; consumed counts and the fetch-latency
histogram equal the per-record brute force.
"""

from __future__ import annotations

import json
import math
import random
import time
import uuid
from collections import defaultdict

import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, Message
from pydantic import BaseModel

from cadenza.infra.kafka.headers import get_header
from cadenza.pipelines import Pipeline
from cadenza.scheduling.context import CONTEXT_HEADER, SchedulingContext, decode_context, encode_context
from cadenza.settings import KafkaSettings
from cadenza.testing.pytest_plugin import NewTopic
from cadenza.worker import Worker
from cadenza.worker.config import WorkerConfig
from cadenza.worker.engine.unit import Unit

pytestmark = pytest.mark.kafka

PARTITIONS = 3


class Reading(BaseModel):
    n: int


def double(reading: Reading) -> Reading:
    return Reading(n=reading.n * 2)


def _batch(rng: random.Random, topic: str, base: dict[int, int], now_ms: int) -> list[Message]:
    """Records of the partitions interleaved at random; timestamps in runs; some with a context
    header written by another pipeline (which must never be shared)."""
    messages = []
    stamp = dict.fromkeys(range(PARTITIONS), now_ms - 5_000)
    for _ in range(rng.randint(1, 60)):
        partition = rng.randrange(PARTITIONS)
        if rng.random() < 0.3:
            stamp[partition] += rng.choice([1, 2, 50])
        headers: list[tuple[str, str | bytes | None]] | None = None
        if rng.random() < 0.15:
            foreign = SchedulingContext(
                "upstream", "t", stamp[partition] / 1000.0, 1.0, 0.0, 0.0, 1, rng.getrandbits(64)
            )
            headers = [(CONTEXT_HEADER, encode_context(foreign))]
        offset = base[partition]
        base[partition] += 1
        messages.append(
            Message(
                topic=topic,
                partition=partition,
                offset=offset,
                key=None,
                value=json.dumps({"n": offset}).encode(),
                headers=headers,
                timestamp=(TIMESTAMP_CREATE_TIME, stamp[partition]),
            )
        )
    return messages


def _expected_sharing(batch: list[Message]) -> list[int | None]:
    """Per record, the index of the record whose context it shares (``None``: its own).

    Brute force of the rule: a record without headers shares with the last record without headers
    of its partition in this batch when their timestamps are equal (and so, transitively, with the
    first of that run).
    """
    last: dict[int, tuple[int, int]] = {}  # partition -> (its last plain record's stamp, run head)
    out: list[int | None] = []
    for index, message in enumerate(batch):
        partition = message.partition()
        assert partition is not None
        if message.headers() is not None:
            out.append(None)
            continue
        stamp = message.timestamp()[1]
        previous = last.get(partition)
        if previous is not None and previous[0] == stamp:
            out.append(previous[1])
        else:
            out.append(None)
            last[partition] = (stamp, index)
    return out


def test_a_batch_is_queued_in_offset_order_with_contexts_shared_only_by_the_rule(
    kafka_settings: KafkaSettings, new_topic: NewTopic
) -> None:
    source = new_topic(partitions=PARTITIONS)
    outs = [new_topic(partitions=PARTITIONS) for _ in range(2)]
    name = f"admit-{uuid.uuid4().hex[:6]}"
    pipelines = []
    for i, out in enumerate(outs):  # two sub-topologies read the source: two units per record
        pipeline = Pipeline(f"{name}-{i}", tenant="t", latency_target="1s")
        pipeline.source(source, value=Reading).map(double).sink(out)
        pipelines.append(pipeline)
    worker = Worker(pipelines, kafka_settings, WorkerConfig(group=f"g-{name}", policy="cameo"))
    worker.start()
    rng = random.Random(20261126)
    base = dict.fromkeys(range(PARTITIONS), 0)
    try:
        for _ in range(8):
            batch = _batch(rng, source, base, int(time.time() * 1000))
            consumed_before = [s.metrics.consumed for s in worker.engine.schedules]
            latency_before = [
                (s.metrics.fetch_latency.count, s.metrics.fetch_latency.sum) for s in worker.engine.schedules
            ]
            started = time.time()
            worker.admit(batch)
            finished = time.time()

            queued: dict[tuple[int, int], list[tuple[SchedulingContext, Unit]]] = defaultdict(list)
            while (quantum := worker.scheduler.next_batch()) is not None:
                queued[quantum.key].extend(quantum)
            sharing = _expected_sharing(batch)
            by_offset = {(m.partition(), m.offset()): i for i, m in enumerate(batch)}
            stamps_s = sum(m.timestamp()[1] for m in batch) / 1000.0
            for index, schedule in enumerate(worker.engine.schedules):
                units = [
                    (ctx, unit)
                    for partition in range(PARTITIONS)
                    for ctx, unit in queued.get((schedule.index, partition), [])
                ]
                assert len(units) == len(batch)  # each record once, nothing else
                for partition in range(PARTITIONS):
                    offsets = [unit.offset for _, unit in queued.get((schedule.index, partition), [])]
                    assert offsets == sorted(offsets)
                    assert offsets == [m.offset() for m in batch if m.partition() == partition]
                ctx_of = {by_offset[(unit.partition, unit.offset)]: ctx for ctx, unit in units}
                for i, shares_with in enumerate(sharing):
                    if shares_with is None:
                        others = [j for j, ctx in ctx_of.items() if j != i and ctx is ctx_of[i]]
                        assert all(sharing[j] == i for j in others), (i, others)
                    else:
                        assert ctx_of[i] is ctx_of[shares_with]
                    assert ctx_of[i].frontier_time == batch[i].timestamp()[1] / 1000.0
                trace_ids = [unit.trace_id for _, unit in units]
                assert len(set(trace_ids)) == len(batch)
                for ctx, unit in units:
                    assert unit.ctx is ctx
                    headers = batch[by_offset[(unit.partition, unit.offset)]].headers()
                    if headers is not None:  # another pipeline's result: a new deadline, its trace
                        foreign = decode_context(get_header(headers, CONTEXT_HEADER))
                        assert foreign is not None and unit.trace_id == foreign.trace_id
                metrics = schedule.metrics
                assert metrics.consumed - consumed_before[index] == len(batch)
                count, total = latency_before[index]
                histogram = metrics.fetch_latency
                assert histogram.count - count == len(batch)
                added = histogram.sum - total
                n = len(batch)
                # Epoch seconds times n are ~7e10, where a double's step is ~1.5e-5 s: the bounds
                # are exact up to a few of those steps, not up to a microsecond.
                slack = 1e-6 + 8 * math.ulp(n * finished)
                assert n * started - stamps_s - slack <= added <= n * finished - stamps_s + slack
            assert worker.counters.units >= 2 * len(batch)
    finally:
        worker.close()
