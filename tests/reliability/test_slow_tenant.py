"""Issue 8, item 6: a tenant whose operator sleeps 50 ms per record cannot push another tenant's p99
above its latency target, under ``cameo`` or ``fair``.

Execution is non-preemptive, so the damage is bounded by one quantum of the slow tenant: a quantum
ends after ``quantum_seconds`` (2 ms) of running, checked after each record, so it is one 50 ms record.
The fast tenant's records, arriving every 20 ms while a backlog of slow records is queued, should
therefore wait at most about 50 ms plus a fetch round. Its target is 200 ms; the test measures the
p99 (printed) and asserts it is under the target, and that the slow tenant still completes.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest
from pydantic import BaseModel

from cadenza.infra.kafka.clients import DeliveryReport, flush_or_raise, make_producer
from cadenza.pipelines import Pipeline
from cadenza.settings import KafkaSettings
from cadenza.testing.pytest_plugin import NewTopic
from cadenza.worker import Worker
from cadenza.worker.config import WorkerConfig
from tests.reliability._support import group, latencies, percentile, quick
from tests.worker.kafka_io import produce, reading, running

pytestmark = [pytest.mark.kafka, pytest.mark.timing, pytest.mark.timeout(60)]

SLEEP_S = 0.05
SLOW_RECORDS = 50  # 2.5 s of sleeping, queued at once
FAST_RECORDS = 100  # one every 20 ms: 2 s, all while the slow backlog drains
FAST_TARGET_S = 0.2


class Event(BaseModel):
    id: int
    sent: float = 0.0


def sleepy(event: Event) -> int:
    time.sleep(SLEEP_S)
    return event.id


@pytest.mark.parametrize("policy", ["cameo", "fair"])
def test_a_slow_tenant_does_not_push_another_tenants_p99_over_its_target(
    kafka_settings: KafkaSettings, new_topic: NewTopic, policy: str
) -> None:
    settings = quick(kafka_settings)
    slow_in, slow_out = new_topic(partitions=2), new_topic(partitions=2)
    fast_in, fast_out = new_topic(partitions=1), new_topic(partitions=1)
    suffix = uuid.uuid4().hex[:6]
    slow = Pipeline(f"slow-{suffix}", tenant="slow", latency_target="30s")
    slow.source(slow_in, value=Event).map(sleepy).sink(slow_out)
    fast = Pipeline(f"fast-{suffix}", tenant="fast", latency_target=f"{FAST_TARGET_S}s")
    fast.source(fast_in, value=Event).map(lambda e: {"id": e.id, "sent": e.sent}).sink(fast_out)
    worker = Worker([slow, fast], settings, WorkerConfig(group=group(), policy=policy))
    with running(worker), reading(settings, [slow_out, fast_out]) as reader:
        produce(
            settings,
            slow_in,
            [(None, Event(id=i).model_dump_json().encode(), None) for i in range(SLOW_RECORDS)],
        )
        time.sleep(0.2)  # the backlog is fetched and queued
        # Not idempotent: an idempotent producer holds its first records until it has a producer id.
        producer, _ = make_producer(settings, **{"linger.ms": 0, "enable.idempotence": False})
        report = DeliveryReport()
        for i in range(FAST_RECORDS):
            producer.produce(
                fast_in, Event(id=i, sent=time.time()).model_dump_json().encode(), on_delivery=report
            )
            producer.poll(0)
            time.sleep(0.02)
        flush_or_raise(producer, report, timeout=30)
        reader.wait_for(
            lambda got: len(got[fast_out]) >= FAST_RECORDS and len(got[slow_out]) >= SLOW_RECORDS,
            timeout=30,
            what="every result of both tenants",
        )
    fast_results = reader.records[fast_out]
    # All there, and in input order: one operator-partition's records run in arrival order, however
    # the scheduler interleaves operator-partitions (the sink has one partition, so its offsets show it).
    in_order = [json.loads(r.value or b"")["id"] for r in sorted(fast_results, key=lambda r: r.offset)]
    assert in_order == list(range(FAST_RECORDS))
    assert sorted(int(r.value or b"-1") for r in reader.records[slow_out]) == list(range(SLOW_RECORDS))
    waits = latencies(fast_results)
    fast_end = max(r.timestamp for r in fast_results)
    slow_meanwhile = sum(1 for r in reader.records[slow_out] if r.timestamp <= fast_end)
    p50, p99 = percentile(waits, 0.5), percentile(waits, 0.99)
    slow_run = max(
        m.run_time.sum / max(1, m.processed)
        for m in worker.exporter.operators()
        if m.labels[0] == "slow" and not m.sink
    )
    print(
        f"{policy}: fast tenant p50 {p50 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms, "
        f"max {max(waits) * 1000:.0f} ms "
        f"(target {FAST_TARGET_S * 1000:.0f} ms) beside a tenant taking {slow_run * 1000:.0f} ms per record; "
        f"slow tenant results while the fast stream ran: {slow_meanwhile}/{SLOW_RECORDS}"
    )
    assert slow_run >= SLEEP_S  # the slow tenant really was slow
    assert slow_meanwhile > 0  # and it was served meanwhile, not starved until the fast tenant was done
    assert p99 <= FAST_TARGET_S
