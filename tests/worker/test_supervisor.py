"""The supervisor's restart rules, with stand-in workers (pure logic, no broker).

The broker-backed evidence that a restart really resumes is tests/reliability/test_broker_outage.py.
"""

from __future__ import annotations

from typing import Any, cast

import pytest
from confluent_kafka import KafkaError, KafkaException

from cadenza.infra.kafka.errors import KafkaClientError, TopicError
from cadenza.infra.metrics.prometheus import PrometheusExporter
from cadenza.worker import Worker
from cadenza.worker.supervisor import WorkerSupervisor


class StandIn:
    """Raises ``failure`` from run() (or returns), after having joined the group or not."""

    def __init__(self, failure: BaseException | None, *, joined: bool = True) -> None:
        self.failure = failure
        self.joined = joined
        self.exporter = PrometheusExporter()
        self.stopped = False
        self.ran = False

    def run(self) -> None:
        self.ran = True
        if self.failure is not None:
            raise self.failure

    def stop(self) -> None:
        self.stopped = True


def supervise(workers: list[StandIn], **limits: Any) -> tuple[WorkerSupervisor, list[StandIn]]:
    made: list[StandIn] = []

    def make() -> Worker:
        worker = workers[len(made)]
        made.append(worker)
        return cast(Worker, worker)

    return WorkerSupervisor(make, backoff=0.0, max_backoff=0.0, **limits), made


def fatal() -> KafkaClientError:
    return KafkaClientError("kafka producer failed fatally: OUT_OF_ORDER_SEQUENCE_NUMBER", code="X")


def test_a_kafka_client_failure_after_the_join_starts_a_fresh_worker() -> None:
    supervisor, made = supervise([StandIn(fatal()), StandIn(fatal()), StandIn(None)])
    last = supervisor.run()
    assert made[-1] is cast(StandIn, last) and len(made) == 3 and supervisor.restarts == 2
    assert b"cadenza_worker_restarts_total 2.0" in last.exporter.render()


def test_a_raw_fatal_kafka_exception_from_a_client_call_restarts_the_worker_too() -> None:
    # A fatal producer error raised by a confluent-kafka call the worker did not wrap, raw or as the
    # SystemError a delivery callback turns it into (seen in the kept-data outage test).
    raw = KafkaException(KafkaError(KafkaError._FATAL, "Unable to produce message: Local: Fatal error"))
    wrapped = SystemError("<function DeliveryReport.__call__> returned a result with an exception set")
    wrapped.__cause__ = raw
    supervisor, made = supervise([StandIn(raw), StandIn(wrapped), StandIn(None)])
    supervisor.run()
    assert len(made) == 3 and supervisor.restarts == 2


def test_a_restarted_worker_that_cannot_join_yet_is_restarted_again() -> None:
    # The broker is still away when the fresh worker starts: it fails before its join, but this
    # process had joined before, so the failure is the outage's, not a setting to fix.
    supervisor, made = supervise([StandIn(fatal()), StandIn(fatal(), joined=False), StandIn(None)])
    supervisor.run()
    assert len(made) == 3 and supervisor.restarts == 2


def test_too_many_failures_within_the_window_end_the_process() -> None:
    supervisor, made = supervise([StandIn(fatal()) for _ in range(4)], max_restarts=2)
    with pytest.raises(KafkaClientError):
        supervisor.run()
    assert len(made) == 3 and supervisor.restarts == 2


@pytest.mark.parametrize(
    "worker",
    [
        StandIn(fatal(), joined=False),  # never joined: a wrong address or setting, the user's to fix
        StandIn(TopicError("topic x has 2 partitions, 4 needed")),  # restarting cannot fix a topic
        StandIn(ValueError("a bug")),  # not a Kafka client failure
        StandIn(SystemError("a bug in C code")),  # a SystemError no KafkaException caused
    ],
    ids=["before-join", "topic-shape", "not-kafka", "system-error"],
)
def test_failures_a_restart_cannot_fix_propagate_at_once(worker: StandIn) -> None:
    supervisor, made = supervise([worker, StandIn(None)])
    assert worker.failure is not None
    with pytest.raises(type(worker.failure)):
        supervisor.run()
    assert len(made) == 1 and supervisor.restarts == 0


def test_a_stop_before_the_run_stops_the_first_worker_and_starts_no_other() -> None:
    first = StandIn(fatal())
    supervisor, made = supervise([StandIn(None)])
    supervisor.stop()
    with pytest.raises(KafkaClientError):
        supervisor.run(cast(Worker, first))
    assert first.stopped and made == []
