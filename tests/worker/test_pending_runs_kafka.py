"""The committable offset through the worker's own admission, when a partition's records share one
pending run: after any number of quanta it is exactly the offset of the first record whose unit has
not run, as an entry per record would give (offset gaps, a record dead-lettered at decode and
partitions interleaved in one batch included). A started worker on the real broker; the records
are built in memory so their offsets can have gaps."""

from __future__ import annotations

import json
import time
import uuid

import pytest
from pydantic import BaseModel

from cadenza.pipelines import Pipeline
from cadenza.settings import KafkaSettings
from cadenza.testing.pytest_plugin import NewTopic
from cadenza.worker import Worker
from cadenza.worker.config import WorkerConfig
from tests.worker.kafka_io import fetched

pytestmark = pytest.mark.kafka


class Reading(BaseModel):
    n: int


def double(reading: Reading) -> Reading:
    return Reading(n=reading.n * 2)


def test_the_committable_offset_is_the_first_record_not_run_after_each_quantum(
    kafka_settings: KafkaSettings, new_topic: NewTopic
) -> None:
    source, out = new_topic(partitions=2), new_topic(partitions=2)
    name = f"runs-{uuid.uuid4().hex[:6]}"
    pipeline = Pipeline(name, tenant="t", latency_target="1s")
    pipeline.source(source, value=Reading).map(double).sink(out)
    worker = Worker(
        [pipeline], kafka_settings, WorkerConfig(group=f"g-{name}", quantum_records=3, policy="fifo")
    )
    worker.start()
    now_ms = int(time.time() * 1000)
    offsets = {0: [0, 2, 3, 7, 8, 9, 15, 16], 1: [4, 5, 6, 10, 11]}  # gaps, as compaction leaves
    bad = {(0, 8)}  # dead-lettered at decode: no unit, done at once
    interleaved = [
        (partition, o[i])
        for i in range(max(len(o) for o in offsets.values()))
        for partition, o in offsets.items()
        if i < len(o)  # the partitions interleaved, record by record
    ]
    batch = [
        fetched(
            source,
            partition,
            offset,
            b"{not json" if (partition, offset) in bad else json.dumps({"n": offset}).encode(),
            now_ms,
        )
        for partition, offset in interleaved
    ]
    try:
        worker.admit(batch)
        waiting = {p: [o for o in offs if (p, o) not in bad] for p, offs in offsets.items()}
        executor = worker.engine.executor
        while True:
            quantum = worker.scheduler.next_batch()
            if quantum is None:
                break
            partition = quantum.key[1]
            ran = executor.run_quantum(quantum, worker.engine.schedules[quantum.key[0]])
            assert ran > 0
            del waiting[partition][:ran]  # one operator-partition runs its records in offset order
            expected = {p: (left[0] if left else offsets[p][-1] + 1) for p, left in waiting.items()}
            progress = worker.engine.inflight.partitions
            assert {p: progress[(source, p)].committable() for p in offsets} == expected
            assert worker.engine.inflight.unfinished() == sum(len(left) for left in waiting.values())
        assert waiting == {0: [], 1: []}
        assert worker.engine.inflight.advanced() == {(source, 0): 17, (source, 1): 12}
    finally:
        worker.close()
