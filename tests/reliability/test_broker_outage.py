"""Issue 8, item 4: the broker stops for about 10 s and comes back on the same port while a worker runs.

This test starts its own embedded broker (the session's broker is shared by other tests and must not
be stopped). The embedded broker keeps everything in memory, so the broker that comes back is empty:
no topics, no records, no committed offsets, no producer ids. The test states that loss (it checks the
topics are gone), recreates the topics as an operator restoring a cluster would, and then checks what
the worker can be responsible for:

- it survives the outage: the worker process keeps serving. Its clients reconnect by themselves;
  when the broker came back without the producer state of the worker's idempotent producer (the
  in-memory broker always does), the producer fails fatally, the worker stops without committing,
  and :meth:`Worker.run <cadenza.worker.Worker.run>` (what ``cadenza worker`` runs) starts it again
  in the same process (``ProcessConfig.max_restarts``), with fresh clients that resume from the
  committed offsets;
- it reports the outage in its log (librdkafka's broker-down errors, as WARNING lines) and in its
  metrics: ``cadenza_broker_reachable`` drops to 0 and ``/readyz`` answers 503 while the broker is
  away, ``cadenza_kafka_client_errors_total`` counts the errors, and both come back once it returns;
- it resumes: records produced after the restart are all processed.

The second test repeats the outage with a broker that keeps its data (the embedded broker on S3
storage) and checks that nothing is lost across it.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition
from pydantic import BaseModel

from cadenza.infra.broker.embedded import EmbeddedBroker
from cadenza.infra.kafka.clients import (
    DeliveryReport,
    flush_or_raise,
    make_admin,
    make_consumer,
    make_producer,
)
from cadenza.infra.kafka.topics import TopicSpec, ensure_topics
from cadenza.pipelines import Pipeline
from cadenza.settings import KafkaSettings
from cadenza.worker import Worker
from cadenza.worker.config import ProcessConfig, WorkerConfig
from cadenza.worker.reliability.quarantine_marks import QUARANTINE_TOPIC
from tests.reliability._support import LocalS3, group
from tests.worker.kafka_io import produce, reading

pytestmark = [
    pytest.mark.slow("stops the broker for about 10 s and waits for the worker to reconnect and catch up"),
    pytest.mark.kafka,
    pytest.mark.timeout(180),
]

OUTAGE_S = 10.0
FAIL_BOUND_S = 20.0
BEFORE = 200
AFTER = 200


class Event(BaseModel):
    id: int


#: Restarts a worker may make after Kafka client failures (``cadenza worker``'s default).
MAX_RESTARTS = 5


class Background:
    """A worker's :meth:`~cadenza.worker.Worker.run` in a thread, as ``cadenza worker`` runs it
    (restarting it in place after a Kafka client failure), keeping what it raised."""

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

    def restarts(self) -> int:
        """Restarts so far, as the worker's current metrics (a fresh registry after each) export them."""
        for line in self.worker.exporter.render().decode().splitlines():
            if line.startswith("cadenza_worker_restarts_total "):
                return int(float(line.rsplit(" ", 1)[1]))
        raise AssertionError("cadenza_worker_restarts_total is not exported")

    def stop(self) -> None:
        self.worker.stop()
        self.thread.join(30)
        assert not self.thread.is_alive(), "the worker did not stop within 30 s"


def metric_values(worker: Worker) -> dict[str, float]:
    """The worker's broker-connection metrics, as scraped: ``{sample line's name and labels: value}``."""
    values = {}
    for line in worker.exporter.render().decode().splitlines():
        if line.startswith(("cadenza_broker_reachable", "cadenza_kafka_client_errors_total")):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    return values


def test_the_worker_process_survives_a_broker_restart_that_lost_its_data(
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
    first = Background(
        Worker(
            [pipeline], settings, WorkerConfig(group=name), process=ProcessConfig(max_restarts=MAX_RESTARTS)
        )
    )
    try:
        assert first.worker.wait_assigned(30), "the first worker got no partitions"
        produce(
            settings, source, [(None, Event(id=i).model_dump_json().encode(), None) for i in range(BEFORE)]
        )
        with reading(settings, [sink]) as reader:
            reader.wait_for(lambda got: len(got[sink]) >= BEFORE, 30, "results before the outage")
        assert sorted(int(r.value or b"-1") for r in reader.records[sink]) == list(range(BEFORE))

        caplog.clear()  # before the stop: repeats are rate-limited, so the first lines must be kept
        broker.stop()
        stopped = time.monotonic()
        time.sleep(OUTAGE_S)
        assert first.error() is None, f"the worker failed during the outage: {first.failure!r}"
        during = metric_values(first.worker)
        ready_during = first.worker.exporter.health.ready
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
            reader.wait_for(lambda got: len(got[sink]) >= AFTER, 60, "results after the restart")
            reader.settle(0.5)
        # The process never stopped serving: at most a restart of its worker, in place.
        assert first.error() is None, f"the worker gave up: {first.failure!r}"
        deadline = time.monotonic() + 10  # statistics arrive once a second
        while metric_values(first.worker).get("cadenza_broker_reachable") != 1.0:
            assert time.monotonic() < deadline, "cadenza_broker_reachable did not return to 1"
            time.sleep(0.2)
        ready_after = first.worker.exporter.health.ready
        scraped = first.worker.exporter.render().decode()
        restarts = first.restarts()
        first.stop()
        assert first.error() is None, repr(first.failure)
    finally:
        first.worker.stop()
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
    # ... and in the metrics and the readiness probe.
    assert during["cadenza_broker_reachable"] == 0.0, during
    consumer_errors = sum(v for k, v in during.items() if k.startswith("cadenza_kafka_client_errors_total"))
    assert consumer_errors > 0, during
    assert not ready_during and ready_after
    # A restart is counted where an operator sees it, and said in the log.
    assert f"cadenza_worker_restarts_total {float(restarts)}" in scraped
    assert restarts <= MAX_RESTARTS
    if restarts:
        assert any("starting it again" in r.getMessage() for r in caplog.records), "restart not logged"
    print(f"outage {outage:.1f} s, {len(outage_lines)} warning lines during it; worker restarts: {restarts}")


KEPT = 1500
RATE = 100  # records per second: production runs before, during and after the outage


class TornWriteError(Exception):
    """The broker left a hole in a log at its stop (see :meth:`LocalS3.log_holes`)."""


#: Outages tried before the test gives up on getting one without a torn write.
ATTEMPTS = 3
#: Seconds without a new result after which the logs are checked for holes.
STALL_S = 10.0


@pytest.mark.timeout(180 * ATTEMPTS)
def test_with_a_broker_that_keeps_its_data_nothing_is_lost_across_an_outage(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """The same outage with a broker that keeps its data (the embedded broker on S3 storage).

    Records are produced at a steady rate before, during (buffered by the producer, which retries)
    and after the outage. Every record's result must arrive; a result may repeat only for a record at
    or after the offset the group had committed when the broker went away (at-least-once: what was
    in flight is redone, nothing else).

    Tansu can tear a write when it stops (its watermark stored, the record batch not): a consumer
    that lands on that hole waits forever, on any client. An outage whose results stall with such a
    hole in the logs is run again (at most ``ATTEMPTS`` in all); one whose results stall without a
    hole fails.
    """
    torn: list[str] = []
    for attempt in range(ATTEMPTS):
        try:
            print(kept_data_outage(tmp_path_factory.mktemp(f"outage-kept-{attempt}")))
            return
        except TornWriteError as exc:
            torn.append(str(exc))
            logging.getLogger(__name__).warning("outage %d: %s; running it again", attempt + 1, exc)
    pytest.fail(f"the broker tore a write at each of {ATTEMPTS} stops: {torn}")


def kept_data_outage(log_dir: Path) -> str:
    """One outage; returns its summary line, raises TornWriteError if its results stalled on a hole."""
    s3 = LocalS3(log_dir / "s3.log")
    broker = EmbeddedBroker(storage=s3.storage, environment=s3.environment, log_path=log_dir / "broker.log")
    restarted: EmbeddedBroker | None = None
    first: Background | None = None
    try:
        broker.start()
        # Batched (50 ms, the worker's producers and the test's): Tansu on S3 stores a record batch per
        # object and lists a partition's objects at every fetch, so one-record batches made fetches
        # slower as the run went on, until under load they took longer than the fetch wait and came
        # back empty every time.
        settings = KafkaSettings.load(
            bootstrap_servers=broker.bootstrap_servers, session_timeout_ms=6000, linger_ms=50
        )
        source, sink = f"kept-in-{uuid.uuid4().hex[:6]}", f"kept-out-{uuid.uuid4().hex[:6]}"
        ensure_topics(
            make_admin(settings), [TopicSpec(source, partitions=1), TopicSpec(sink, partitions=1)], 10
        )
        pipeline = Pipeline(f"kept-{uuid.uuid4().hex[:6]}", tenant="t", latency_target="1s")
        pipeline.source(source, value=Event).map(lambda e: e.id).sink(sink)
        name = group()
        # The worker's fetch.wait.max.ms (20 ms) is shorter than Tansu needs to read a batch back from
        # S3 storage: every fetch then came back empty and the worker read 7 of 1,500 records. Kafka
        # answers a fetch as soon as data is there, so the wait is only a bound; raise it here.
        patient = {"fetch.wait.max.ms": 500}
        first = Background(
            Worker(
                [pipeline],
                settings,
                WorkerConfig(group=name, consumer_overrides=patient),
                process=ProcessConfig(max_restarts=MAX_RESTARTS),
            )
        )
        assert first.worker.wait_assigned(30), "the worker got no partitions"
        # Not idempotent: the producer's own retries across the outage may store a record twice, which
        # the check below tells apart from the worker's replays by reading the input back.
        producer, producer_errors = make_producer(
            settings,
            **{
                "enable.idempotence": False,
                "max.in.flight.requests.per.connection": 1,
                "delivery.timeout.ms": 120_000,
                "request.timeout.ms": 5_000,
            },
        )
        report = DeliveryReport()

        def feed() -> None:
            for i in range(KEPT):
                producer.produce(source, Event(id=i).model_dump_json().encode(), on_delivery=report)
                producer.poll(0)
                time.sleep(1 / RATE)

        feeder = threading.Thread(target=feed, daemon=True)
        feeder.start()
        time.sleep(4)
        committed = committed_offset(settings, name, source)
        broker.stop()
        time.sleep(OUTAGE_S)
        if first.failure is not None and (holes := s3.log_holes([source, sink, QUARANTINE_TOPIC])):
            raise TornWriteError(f"the worker failed during the outage ({first.failure!r}); holes: {holes}")
        assert first.failure is None, f"the worker failed during the outage: {first.failure!r}"
        restarted = EmbeddedBroker(
            port=broker.port,
            storage=s3.storage,
            environment=s3.environment,
            log_path=log_dir / "broker-2.log",
        )
        restarted.start()
        back = time.monotonic()
        # This broker kept its data: the topics are still there (the in-memory one lost them).
        assert source in make_admin(settings).list_topics(timeout=10).topics
        feeder.join(60)
        flush_or_raise(producer, report, timeout=120)
        producer_errors.raise_fatal()
        with reading(settings, [source, sink]) as reader:
            deadline = time.monotonic() + 90
            results, progressed = 0, time.monotonic()
            while results < KEPT:
                if time.monotonic() - progressed > STALL_S:
                    holes = s3.log_holes([source, sink, QUARANTINE_TOPIC])
                    if holes:
                        raise TornWriteError(f"results stalled at {results} of {KEPT}; holes: {holes}")
                    progressed = time.monotonic()
                assert time.monotonic() < deadline, (
                    f"results: {len(reader.records[sink])} of {KEPT}; worker: {first.worker.counters}, "
                    f"{first.failure!r}, input records read back: {len(reader.records[source])}"
                )
                reader.poll(0.2)
                now = len({int(r.value or b"-1") for r in reader.records[sink]})
                if now > results:
                    results, progressed = now, time.monotonic()
            reader.settle(1.0)
            # Reading the input back from its start lands on any hole the stop tore in the source's
            # log, and waits there: every result can be in while the read-back stopped short.
            read_back = {int(Event.model_validate_json(r.value or b"").id) for r in reader.records[source]}
            if len(read_back) < KEPT and (holes := s3.log_holes([source])):
                raise TornWriteError(
                    f"the input read back stopped at {len(read_back)} of {KEPT}; holes: {holes}"
                )
        caught_up = time.monotonic() - back
        assert first.error() is None, f"the worker gave up: {first.failure!r}"
        restarts = first.restarts()
        first.stop()
        assert first.error() is None, repr(first.failure)
    finally:
        if first is not None:
            first.worker.stop()
        for running_broker in (restarted, broker):
            if running_broker is not None:
                running_broker.stop()
        s3.close()

    inputs = [(r.offset, int(Event.model_validate_json(r.value or b"").id)) for r in reader.records[source]]
    stored = Counter(i for _, i in inputs)
    assert sorted(stored) == list(range(KEPT)), "the broker lost input records"
    produced = Counter(int(r.value or b"-1") for r in reader.records[sink])
    assert sorted(produced) == list(range(KEPT)), "results lost"  # nothing lost
    replayed = {i: produced[i] - stored[i] for i in produced if produced[i] > stored[i]}
    first_offset = {i: offset for offset, i in reversed(inputs)}
    early = [i for i in replayed if first_offset[i] < committed]
    assert not early, f"records below the committed offset {committed} were redone: {early[:10]}"
    return (
        f"kept-data outage {OUTAGE_S:.0f} s: {KEPT} records, {sum(stored.values()) - KEPT} stored twice by "
        f"producer retries, {sum(replayed.values())} results repeated by the worker (all at or after the "
        f"committed offset {committed}); worker restarts: {restarts}; all results {caught_up:.1f} s after "
        "the broker came back"
    )


def committed_offset(settings: KafkaSettings, group_id: str, topic: str) -> int:
    """The group's committed offset of partition 0 (0 if none yet)."""
    consumer, _ = make_consumer(settings, group_id)
    try:
        (position,) = consumer.committed([TopicPartition(topic, 0)], timeout=10)
    finally:
        consumer.close()
    return max(0, position.offset)
