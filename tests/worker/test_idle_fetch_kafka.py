"""A worker with nothing queued hands a record to its scheduler as soon as the client has it.

librdkafka's batch consume (``consume(n, timeout)``) waits the whole timeout unless ``n`` records
arrive; a worker that called it with its full batch size whenever its buffer was empty held every
record of a quiet stream for up to ``poll_timeout`` (0.1 s by default: a third of a 300 ms target,
paid again at each repartition hop). With a long ``poll_timeout`` here, the old behaviour takes
seconds and the new one a broker round trip.
"""

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
from tests.worker.kafka_io import produce, reading, running

pytestmark = pytest.mark.kafka

POLL_TIMEOUT = 8.0


class Event(BaseModel):
    n: int


@pytest.mark.timing  # asserts on how long a record waited, measured on this host
def test_an_idle_worker_does_not_sit_on_a_fetched_record_for_its_poll_timeout(
    kafka_settings: KafkaSettings, new_topic: NewTopic
) -> None:
    source, out = new_topic(partitions=1), new_topic()
    name = f"idle-fetch-{uuid.uuid4().hex[:6]}"
    p = Pipeline(name, tenant="t", latency_target="1s")
    p.source(source, value=Event).sink(out)
    worker = Worker([p], kafka_settings, WorkerConfig(group=f"g-{name}", poll_timeout=POLL_TIMEOUT))
    with running(worker), reading(kafka_settings, [out]) as reader:
        produce(kafka_settings, source, [(None, json.dumps({"n": 0}).encode(), 0)])
        reader.wait_for(lambda r: len(r[out]) >= 1, 60, "the first result")  # the group is warm now
        time.sleep(1.0)  # the worker's buffer is empty: it waits in consume
        latencies = []
        for n in range(1, 4):
            sent = time.monotonic()
            produce(kafka_settings, source, [(None, json.dumps({"n": n}).encode(), 0)])
            expected = n + 1
            reader.wait_for(lambda r: len(r[out]) >= expected, 60, f"result {n}")  # noqa: B023
            latencies.append(time.monotonic() - sent)
    schedule = worker.engine.schedules[0]
    assert schedule.metrics.fetch_latency.count == 4
    # Each well under the poll timeout (the old behaviour: about POLL_TIMEOUT each).
    assert max(latencies) < POLL_TIMEOUT / 2, latencies
