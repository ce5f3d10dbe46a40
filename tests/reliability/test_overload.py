"""Issue 8, item 5: a burst of ten times the worker's buffer bound.

A ``cadenza worker`` process (``--max-buffered 500``) runs three tenants: ``LS`` (latency-sensitive,
target 250 ms, a paced trickle) and two bulk tenants ``A`` (target 10 s) and ``B`` (target 60 s). A
burst of 5,000 records of about 16 KiB each (10 x the bound; 80 MiB in all) lands on A and B at once,
while LS keeps sending. Checked, per policy:

- memory: the worker's RSS, sampled every 20 ms, grows by less than ``RSS_GROWTH_BOUND`` over its
  idle RSS (the burst would need several times that if it were held in memory; the bound is what the
  fetcher allows: ``max_buffered`` decoded records plus librdkafka's prefetch queue, capped at 32 MiB
  by the worker, plus slack) - measured numbers are printed;
- ``cameo``: LS is served first: its records' p99 wait in the scheduler is a fraction of its target;
- under ``cameo`` LS's end-to-end p95 stays within four times its target. Measured over 8 runs: p95
  120-576 ms, p99 196-677 ms (under ``fair`` p95 103-164 ms). The tail is not made in the scheduler
  (LS's queue wait there stays <= 25-50 ms, checked below) but before it: fetching, with the test
  process producing 80 MiB and reading the results on the same 2 cores. That ``cameo`` shows a longer
  tail here than ``fair`` is an open finding (see docs/operations/reliability.md). The bound catches what this
  used to be, 1 to 5 s for most LS records:
  a poll could take a whole batch of one bursting partition, fill the buffer and trip the
  pause-everything brake, which paused LS's partitions too; the fetcher now takes at most one
  partition's share per poll and pauses partitions at their share of half the buffer;
- ``fair``: every tenant progresses: by the time the first bulk tenant has finished, the other has done
  at least a tenth of its burst (measured: 38% to 90%; under ``cameo``, 0% to 90%: in this setup what
  the fetcher admits, not the policy, decides most of the order); LS's latency is printed.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from pathlib import Path

import pytest

from cadenza.infra.kafka.clients import DeliveryReport, flush_or_raise, make_producer
from cadenza.settings import KafkaSettings
from cadenza.testing.pytest_plugin import NewTopic
from tests.reliability._support import (
    RssSampler,
    WorkerProcess,
    group,
    latencies,
    percentile,
    quick,
    rss_bytes,
    wait_reading,
)
from tests.worker.kafka_io import Outgoing, Record, produce, reading

pytestmark = [
    pytest.mark.slow("produces 80 MiB through the broker and samples the worker's RSS while it drains"),
    pytest.mark.kafka,
    pytest.mark.timing,
    pytest.mark.timeout(90),
]

MAX_BUFFERED = 500
BURST = 10 * MAX_BUFFERED  # half on A, half on B
PAD = 16 * 1024
LS_TARGET_S = 0.25
LS_RECORDS = 60
MIB = 1024 * 1024
#: RSS growth allowed over idle: 500 buffered records (value bytes, Message, model: ~3 x 16 KiB each,
#: ~24 MiB) and librdkafka's prefetch queue (capped at 32 MiB). Measured: +31 to +35 MiB over an idle
#: 59 MiB, and +40 MiB once the worker stopped waiting for acknowledgements (CI at 4652c0b), for a
#: burst of 78 MiB. Below the burst's size, so staying under it shows the burst was held back at the
#: broker (an earlier second bound of half the burst, 39 MiB, lay below this design bound itself).
RSS_GROWTH_BOUND = 64 * MIB

PIPELINES = """
import os
import time

from pydantic import BaseModel

from cadenza.pipelines import Pipeline


class Rec(BaseModel):
    id: int
    sent: float
    pad: str = ""


def light(r: Rec) -> dict:
    return {"id": r.id, "sent": r.sent}


def heavy(r: Rec) -> dict:
    until = time.perf_counter() + 0.0004  # CPU work, so the burst takes a while to drain
    while time.perf_counter() < until:
        pass
    return {"id": r.id, "sent": r.sent}


env = os.environ
ls = Pipeline(env["OV_PREFIX"] + "-ls", tenant="LS", latency_target="250ms")
ls.source(env["OV_LS_IN"], value=Rec).map(light).sink(env["OV_LS_OUT"])
a = Pipeline(env["OV_PREFIX"] + "-a", tenant="A", latency_target="10s")
a.source(env["OV_A_IN"], value=Rec).map(heavy).sink(env["OV_A_OUT"])
b = Pipeline(env["OV_PREFIX"] + "-b", tenant="B", latency_target="60s")
b.source(env["OV_B_IN"], value=Rec).map(heavy).sink(env["OV_B_OUT"])
"""


def record(i: int, pad: int = 0) -> bytes:
    return json.dumps({"id": i, "sent": time.time(), "pad": "p" * pad}).encode()


def queue_wait_quantile(exposition: str, tenant: str, q: float) -> float:
    """The upper bound of the queue-wait histogram bucket holding the ``q`` quantile of a tenant's
    (non-sink) operator, from the worker's Prometheus exposition."""
    buckets: list[tuple[float, float]] = []
    for line in exposition.splitlines():
        if line.startswith("cadenza_queue_wait_seconds_bucket{") and f'tenant="{tenant}"' in line:
            le = line.split('le="', 1)[1].split('"', 1)[0]
            buckets.append((float(le), float(line.rsplit(" ", 1)[1])))
    buckets.sort()
    total = buckets[-1][1]
    assert total > 0, f"no queue-wait observations for tenant {tenant}"
    return next(le for le, cumulative in buckets if cumulative >= q * total)


def finished_at(records: list[Record], count: int) -> float:
    """When the ``count``-th distinct result was produced (the results' CreateTime)."""
    times = sorted({json.loads(r.value or b"")["id"]: r.timestamp for r in records}.values())
    return times[count - 1]


@pytest.mark.parametrize("policy", ["cameo", "fair"])
def test_a_burst_of_ten_times_the_buffer(
    kafka_settings: KafkaSettings, new_topic: NewTopic, tmp_path: Path, policy: str
) -> None:
    settings = quick(kafka_settings)
    topics = {
        "LS_IN": new_topic(partitions=1),
        "LS_OUT": new_topic(partitions=1),
        "A_IN": new_topic(partitions=2),
        "A_OUT": new_topic(partitions=2),
        "B_IN": new_topic(partitions=2),
        "B_OUT": new_topic(partitions=2),
    }
    module = tmp_path / "overload_pipelines.py"
    module.write_text(PIPELINES)
    env = {f"OV_{k}": v for k, v in topics.items()} | {"OV_PREFIX": f"ov-{uuid.uuid4().hex[:6]}"}
    worker = WorkerProcess(
        module,
        settings,
        group(),
        tmp_path / "worker.log",
        "--policy",
        policy,
        "--max-buffered",
        str(MAX_BUFFERED),
        env=env,
        metrics=True,
    )
    ls_out, a_out, b_out = topics["LS_OUT"], topics["A_OUT"], topics["B_OUT"]
    half = BURST // 2
    try:
        worker.wait_running()
        with reading(settings, [ls_out, a_out, b_out]) as reader:
            # Warm up: the worker is in the group and has run every pipeline once.
            produce(settings, topics["LS_IN"], [(None, record(-1), None)])
            produce(settings, topics["A_IN"], [(None, record(-1), None)])
            produce(settings, topics["B_IN"], [(None, record(-1), None)])
            wait_reading(
                reader, lambda: all(reader.records[t] for t in (ls_out, a_out, b_out)), 30, "warm-up", worker
            )
            time.sleep(0.5)
            idle = max(rss_bytes(worker.pid) for _ in range(5))

            def burst(topic: str) -> None:
                batch: list[Outgoing] = [(None, record(i, PAD), None) for i in range(half)]
                produce(settings, topic, batch)

            with RssSampler(worker.pid) as rss:
                # A and B burst at the same moment, so neither gets a head start.
                floods = [
                    threading.Thread(target=burst, args=(topics[t],), daemon=True) for t in ("A_IN", "B_IN")
                ]
                for flood in floods:
                    flood.start()
                producer, _ = make_producer(settings, **{"linger.ms": 0, "enable.idempotence": False})
                report = DeliveryReport()
                for i in range(LS_RECORDS):
                    producer.produce(topics["LS_IN"], record(i), on_delivery=report)
                    producer.poll(0)
                    reader.poll(0.05)
                flush_or_raise(producer, report, timeout=30)
                for flood in floods:
                    flood.join(60)
                wait_reading(
                    reader,
                    lambda: (
                        len(reader.records[a_out]) > half
                        and len(reader.records[b_out]) > half
                        and len(reader.records[ls_out]) > LS_RECORDS
                    ),
                    60,
                    lambda: f"every result ({ {t: len(r) for t, r in reader.records.items()} })",
                    worker,
                )
        exposition = worker.scrape()
        assert worker.terminate() == 0, worker.text()[-2000:]
    finally:
        worker.kill()

    def ids(topic: str) -> list[int]:
        return sorted(json.loads(r.value or b"")["id"] for r in reader.records[topic])

    for topic, count in ((a_out, half), (b_out, half), (ls_out, LS_RECORDS)):
        assert ids(topic) == list(range(-1, count)), f"{topic}: lost or repeated results"
    growth = rss.peak - idle
    ls_waits = latencies([r for r in reader.records[ls_out] if json.loads(r.value or b"")["id"] >= 0])
    ls_p95, ls_p99 = percentile(ls_waits, 0.95), percentile(ls_waits, 0.99)
    first_done = min(
        finished_at(reader.records[a_out], half + 1), finished_at(reader.records[b_out], half + 1)
    )
    progress = {
        tenant: sum(1 for r in reader.records[topic] if r.timestamp <= first_done) / (half + 1)
        for tenant, topic in (("A", a_out), ("B", b_out))
    }
    print(
        f"{policy}: burst {BURST} x {PAD // 1024} KiB ({BURST * PAD / MIB:.0f} MiB), "
        f"max_buffered {MAX_BUFFERED}: "
        f"RSS idle {idle / MIB:.0f} MiB, peak {rss.peak / MIB:.0f} MiB (+{growth / MIB:.0f} MiB, "
        f"{rss.samples} samples); LS p50 {percentile(ls_waits, 0.5) * 1000:.0f} ms "
        f"p95 {ls_p95 * 1000:.0f} ms p99 {ls_p99 * 1000:.0f} ms; "
        f"progress when the first bulk tenant finished: A {progress['A']:.0%}, B {progress['B']:.0%}"
    )
    assert rss.samples > 10
    assert growth < RSS_GROWTH_BOUND  # less than the burst (78 MiB): it was held back at the broker
    ls_wait95, ls_wait99 = (queue_wait_quantile(exposition, "LS", q) for q in (0.95, 0.99))
    a_wait = queue_wait_quantile(exposition, "A", 0.5)
    print(
        f"{policy}: queue wait in the scheduler: LS p95 <= {ls_wait95 * 1000:g} ms, "
        f"p99 <= {ls_wait99 * 1000:g} ms, A p50 <= {a_wait * 1000:g} ms"
    )
    if policy == "cameo":
        # End to end, burst or not: p95, not p99 (of 60 samples p99 is the single worst, which the
        # test's own producing and reading can delay), with the margin the docstring explains.
        assert ls_p95 <= 4 * LS_TARGET_S, f"LS p95 {ls_p95 * 1000:.0f} ms"
        # Served first: once fetched, LS records wait in the scheduler far less than LS's target,
        # and even the worst within it. p95 for "far less", as end to end: of the LS records' 60
        # waits p99 is the single worst, and a CI run (2 loaded cores, half an hour in) saw one in
        # the 50-250 ms bucket; two busy-loop processes beside the test put it in 50-100 ms once in
        # six runs. (The bulk tenants now wait mostly at the broker, paused at their share of the
        # buffer, so their wait inside the scheduler is no longer a useful comparison.)
        assert ls_wait95 <= LS_TARGET_S / 5
        assert ls_wait99 <= LS_TARGET_S
    else:
        assert min(progress.values()) >= 0.1  # neither bulk tenant starved
