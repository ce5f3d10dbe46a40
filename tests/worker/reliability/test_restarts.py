"""The worker's restart rules (:class:`RestartBudget`), with stand-in incarnations (pure logic, no
broker): ``Worker.run`` runs its incarnations through :meth:`RestartBudget.run`.

The broker-backed evidence that a restart really resumes is tests/reliability/test_broker_outage.py.
"""

from __future__ import annotations

import threading

import pytest
from confluent_kafka import KafkaError, KafkaException

from cadenza.infra.kafka.errors import KafkaClientError, TopicError
from cadenza.worker.reliability.restarts import RestartBudget, restartable


class StandIns:
    """Incarnations that each raise their ``failure`` (or return), after having joined the group or
    not; ``afresh`` counts the fresh starts between them."""

    def __init__(self, *outcomes: tuple[BaseException | None, bool]) -> None:
        self.outcomes = list(outcomes)
        self.ran = 0
        self.fresh = 0
        self._joined = False

    def incarnation(self) -> None:
        failure, self._joined = self.outcomes[self.ran]
        self.ran += 1
        if failure is not None:
            raise failure

    def joined(self) -> bool:
        return self._joined

    def afresh(self) -> None:
        self.fresh += 1

    def run(self, budget: RestartBudget, stop: threading.Event | None = None) -> None:
        budget.run(
            self.incarnation,
            stop if stop is not None else threading.Event(),
            joined=self.joined,
            afresh=self.afresh,
        )


def budget(max_restarts: int = 5) -> RestartBudget:
    return RestartBudget(max_restarts, backoff=0.0, max_backoff=0.0)


def fatal() -> KafkaClientError:
    return KafkaClientError("kafka producer failed fatally: OUT_OF_ORDER_SEQUENCE_NUMBER", code="X")


def test_a_kafka_client_failure_after_the_join_starts_the_worker_afresh() -> None:
    stand_ins, rules = StandIns((fatal(), True), (fatal(), True), (None, True)), budget()
    stand_ins.run(rules)
    assert stand_ins.ran == 3 and stand_ins.fresh == 2 and rules.restarts == 2


def test_a_raw_fatal_kafka_exception_from_a_client_call_restarts_the_worker_too() -> None:
    # A fatal producer error raised by a confluent-kafka call the worker did not wrap, raw or as the
    # SystemError a delivery callback turns it into (seen in the kept-data outage test).
    raw = KafkaException(KafkaError(KafkaError._FATAL, "Unable to produce message: Local: Fatal error"))
    wrapped = SystemError("<function DeliveryReport.__call__> returned a result with an exception set")
    wrapped.__cause__ = raw
    assert restartable(raw) is not None and restartable(wrapped) is not None
    stand_ins, rules = StandIns((raw, True), (wrapped, True), (None, True)), budget()
    stand_ins.run(rules)
    assert stand_ins.ran == 3 and rules.restarts == 2


def test_a_restarted_worker_that_cannot_join_yet_is_restarted_again() -> None:
    # The broker is still away when the fresh incarnation starts: it fails before its join, but this
    # process had joined before, so the failure is the outage's, not a setting to fix.
    stand_ins, rules = StandIns((fatal(), True), (fatal(), False), (None, False)), budget()
    stand_ins.run(rules)
    assert stand_ins.ran == 3 and rules.restarts == 2


def test_too_many_failures_within_the_window_end_the_process() -> None:
    stand_ins, rules = StandIns(*[(fatal(), True)] * 4), budget(max_restarts=2)
    with pytest.raises(KafkaClientError):
        stand_ins.run(rules)
    assert stand_ins.ran == 3 and rules.restarts == 2


def test_restarts_that_left_the_window_no_longer_count() -> None:
    now = [0.0]
    rules = RestartBudget(1, window=60.0, backoff=0.0, max_backoff=0.0, clock=lambda: now[0])

    class Later(StandIns):
        def incarnation(self) -> None:
            now[0] += 100.0  # each incarnation fails long after the last restart
            super().incarnation()

    stand_ins = Later((fatal(), True), (fatal(), True), (fatal(), True), (None, True))
    stand_ins.run(rules)
    assert stand_ins.ran == 4 and rules.restarts == 3


def test_no_restarts_allowed_raises_the_first_failure() -> None:
    stand_ins, rules = StandIns((fatal(), True), (None, True)), budget(max_restarts=0)
    with pytest.raises(KafkaClientError):
        stand_ins.run(rules)
    assert stand_ins.ran == 1 and rules.restarts == 0


@pytest.mark.parametrize(
    ("failure", "joined"),
    [
        (fatal(), False),  # never joined: a wrong address or setting, the user's to fix
        (TopicError("topic x has 2 partitions, 4 needed"), True),  # restarting cannot fix a topic
        (ValueError("a bug"), True),  # not a Kafka client failure
        (SystemError("a bug in C code"), True),  # a SystemError no KafkaException caused
    ],
    ids=["before-join", "topic-shape", "not-kafka", "system-error"],
)
def test_failures_a_restart_cannot_fix_propagate_at_once(failure: BaseException, joined: bool) -> None:
    stand_ins, rules = StandIns((failure, joined), (None, True)), budget()
    with pytest.raises(type(failure)):
        stand_ins.run(rules)
    assert stand_ins.ran == 1 and stand_ins.fresh == 0 and rules.restarts == 0


def test_a_failure_after_the_stop_is_not_restarted() -> None:
    stop = threading.Event()
    stop.set()
    stand_ins, rules = StandIns((fatal(), True), (None, True)), budget()
    with pytest.raises(KafkaClientError):
        stand_ins.run(rules, stop)
    assert stand_ins.ran == 1 and stand_ins.fresh == 0 and rules.restarts == 0


def test_a_stop_during_the_back_off_returns_without_starting_afresh() -> None:
    class StopWhileWaiting(threading.Event):
        """The stop comes while the budget waits out the back-off."""

        def wait(self, timeout: float | None = None) -> bool:
            self.set()
            return True

    stand_ins, rules = StandIns((fatal(), True), (None, True)), budget()
    stand_ins.run(rules, StopWhileWaiting())
    assert stand_ins.ran == 1 and stand_ins.fresh == 0 and rules.restarts == 1
