"""Issue 8, item 4: the broker stops for about 10 s and comes back on the same port while a worker runs.

This test starts its own embedded broker (the session's broker is shared by other tests and must not
be stopped). The embedded broker keeps everything in memory, so the broker that comes back is empty:
no topics, no records, no committed offsets, no producer ids. The test states that loss (it checks the
topics are gone), recreates the topics as an operator restoring a cluster would, and then checks what
the worker can be responsible for:

- it survives the outage (its thread is still running, no exception);
- it reports the outage in its log (librdkafka's broker-down errors, as WARNING lines);
- it resumes: records produced after the restart are all processed.

What a broker that keeps its data (a real Kafka cluster or a container) would add, namely nothing
lost across the outage, is not tested here: no such broker is available on this machine.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid

import pytest
from pydantic import BaseModel

from cadenza.infra.broker.embedded import EmbeddedBroker
from cadenza.infra.kafka.clients import make_admin
from cadenza.infra.kafka.topics import TopicSpec, ensure_topics
from cadenza.pipelines import Pipeline
from cadenza.settings import KafkaSettings
from cadenza.worker import Worker
from tests.reliability._support import group
from tests.worker.kafka_io import produce, reading

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(120)]

OUTAGE_S = 10.0
FAIL_BOUND_S = 20.0
BEFORE = 200
AFTER = 200


class Event(BaseModel):
    id: int


class Background:
    """A worker run in a thread, keeping what it raised (``running`` would re-raise it at exit)."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.failure: BaseException | None = None
        self.failed_at = 0.0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.worker.run()
        except BaseException as exc:
            self.failure = exc
            self.failed_at = time.monotonic()

    def error(self) -> BaseException | None:
        """What the worker raised so far (a method, so a check is never taken as settled)."""
        return self.failure

    def stop(self) -> None:
        self.worker.stop()
        self.thread.join(30)
        assert not self.thread.is_alive(), "the worker did not stop within 30 s"


def test_the_worker_survives_a_broker_restart_or_fails_fast_and_recovers_on_restart(
    tmp_path_factory: pytest.TempPathFactory, caplog: pytest.LogCaptureFixture
) -> None:
    log_dir = tmp_path_factory.mktemp("outage")
    broker = EmbeddedBroker(log_path=log_dir / "broker.log")
    broker.start()
    port = broker.port
    settings = KafkaSettings.load(bootstrap_servers=broker.bootstrap_servers, session_timeout_ms=3000)
    source, sink = f"outage-in-{uuid.uuid4().hex[:6]}", f"outage-out-{uuid.uuid4().hex[:6]}"
    topics = [TopicSpec(source, partitions=2), TopicSpec(sink, partitions=2)]
    ensure_topics(make_admin(settings), topics, timeout=10)
    pipeline = Pipeline(f"outage-{uuid.uuid4().hex[:6]}", tenant="t", latency_target="1s")
    pipeline.source(source, value=Event).map(lambda e: e.id).sink(sink)
    name = group()
    caplog.set_level(logging.WARNING, logger="cadenza")
    restarted: EmbeddedBroker | None = None
    first = Background(Worker([pipeline], settings, group=name))
    second: Background | None = None
    try:
        assert first.worker.wait_assigned(30), "the first worker got no partitions"
        produce(
            settings, source, [(None, Event(id=i).model_dump_json().encode(), None) for i in range(BEFORE)]
        )
        with reading(settings, [sink]) as reader:
            reader.wait_for(lambda got: len(got[sink]) >= BEFORE, 30, "results before the outage")
        assert sorted(int(r.value or b"-1") for r in reader.records[sink]) == list(range(BEFORE))

        broker.stop()
        stopped = time.monotonic()
        caplog.clear()
        time.sleep(OUTAGE_S)
        assert first.failure is None, f"the worker failed during the outage: {first.failure!r}"
        outage_lines = [r.getMessage() for r in caplog.records if r.name.startswith("cadenza")]
        restarted = EmbeddedBroker(port=port, log_path=log_dir / "broker-2.log")
        restarted.start()
        back = time.monotonic()
        outage = back - stopped

        # The in-memory broker came back empty: the data loss is the broker's, stated here.
        metadata = make_admin(settings).list_topics(timeout=10)
        assert source not in metadata.topics and sink not in metadata.topics
        ensure_topics(make_admin(settings), topics, timeout=10)
        after = [(None, Event(id=i).model_dump_json().encode(), None) for i in range(BEFORE, BEFORE + AFTER)]
        produce(settings, source, after)
        with reading(settings, [sink]) as reader:
            deadline = time.monotonic() + FAIL_BOUND_S
            while len(reader.records[sink]) < AFTER and first.error() is None and time.monotonic() < deadline:
                reader.poll(0.2)
            if first.error() is not None:
                # The worker's idempotent producer finds its sequence numbers unknown to the new broker:
                # a fatal producer error. The worker stops promptly, committing nothing; a restart (what
                # a supervisor does with the CLI's non-zero exit) gets a new producer id and resumes.
                outcome = (
                    f"stopped {first.failed_at - back:.1f} s after the broker came back: {first.failure}"
                )
                second = Background(Worker([pipeline], settings, group=name))
            else:
                outcome = "kept running"
            reader.wait_for(lambda got: len(got[sink]) >= AFTER, 60, "results after the restart")
            reader.settle(0.5)
        for background in (first, second):
            if background is not None and background.failure is None:
                background.stop()
                assert background.failure is None, repr(background.failure)
    finally:
        for background in (first, second):
            if background is not None:
                background.worker.stop()
        if restarted is not None:
            restarted.stop()
        broker.stop()

    # Everything produced after the restart was processed, once; nothing from before is replayed
    # (the old records went down with the broker).
    assert sorted(int(r.value or b"-1") for r in reader.records[sink]) == list(range(BEFORE, BEFORE + AFTER))
    # The outage was reported while it lasted (librdkafka's broker-down errors, as WARNING lines).
    assert any("_TRANSPORT" in line or "_ALL_BROKERS_DOWN" in line for line in outage_lines), outage_lines[
        :10
    ]
    if first.error() is not None:
        assert "sequence" in str(first.failure).lower() or "fatal" in str(first.failure).lower()
        assert first.failed_at - back < FAIL_BOUND_S
    print(f"outage {outage:.1f} s, {len(outage_lines)} warning lines during it; the first worker {outcome}")
