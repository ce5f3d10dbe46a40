"""ClientErrors and RepeatFilter: what librdkafka's callbacks and log lines turn into (no broker needed)."""

from __future__ import annotations

import json
import logging

import pytest
from confluent_kafka import KafkaError

from cadenza.infra.kafka.clients import ClientErrors
from cadenza.infra.kafka.errors import KafkaClientError
from cadenza.infra.kafka.logs import RepeatFilter


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def transport(detail: str = "Connect to 127.0.0.1:9092 failed") -> KafkaError:
    return KafkaError(KafkaError._TRANSPORT, detail)


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "cadenza.kafka"]


def test_repeated_errors_are_logged_once_per_interval_and_counted_exactly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="cadenza.kafka")
    clock = Clock()
    errors = ClientErrors("consumer", log_interval=10.0, clock=clock)
    for second in range(10):  # one reconnect failure a second, for ten seconds
        clock.now = float(second)
        errors(transport())
    assert lines(caplog) == ["kafka consumer: _TRANSPORT: Connect to 127.0.0.1:9092 failed"]
    clock.now = 10.0
    errors(transport())
    assert lines(caplog)[1] == (
        "kafka consumer: _TRANSPORT: Connect to 127.0.0.1:9092 failed "
        "(9 more like it in the last 10 s not logged)"
    )
    assert errors.counts == {"_TRANSPORT": 11}


def test_other_errors_and_fatal_ones_are_not_held_back(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="cadenza.kafka")
    errors = ClientErrors("producer", log_interval=10.0, clock=Clock())
    errors(transport())
    errors(KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))
    fatal = KafkaError(KafkaError._FATAL, "OUT_OF_ORDER_SEQUENCE_NUMBER", fatal=True)
    errors(fatal)
    errors(fatal)
    logged = lines(caplog)
    assert len(logged) == 4, logged
    assert [r.levelno for r in caplog.records][-2:] == [logging.ERROR, logging.ERROR]
    with pytest.raises(KafkaClientError):
        errors.raise_fatal()


def reachable(errors: ClientErrors) -> bool:
    """Read through a call: each callback may flip the flag (mypy would otherwise narrow it)."""
    return errors.brokers_up


def test_brokers_down_until_statistics_show_a_connection_up() -> None:
    errors = ClientErrors("consumer", clock=Clock())
    assert reachable(errors)
    errors(KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))
    assert not reachable(errors)
    down = {"brokers": {"127.0.0.1:9092/1": {"state": "CONNECT", "nodeid": 1}}}
    errors.statistics(json.dumps(down))
    assert not reachable(errors)
    errors.statistics("{not json")  # ignored, never raised into the poll loop
    errors.statistics("[]")
    assert not reachable(errors)
    up = {"brokers": {"127.0.0.1:9092/1": {"state": "UP", "nodeid": 1}}}
    errors.statistics(json.dumps(up))
    assert reachable(errors)
    errors.statistics(json.dumps(down))
    assert not reachable(errors)


def test_librdkafka_repeats_pass_once_per_interval_with_the_count_left_out() -> None:
    clock = Clock()
    repeats = RepeatFilter(interval=10.0, clock=clock)

    def line(facility: str, client: str, text: str) -> logging.LogRecord:
        return logging.LogRecord(
            "cadenza.kafka.librdkafka", logging.ERROR, "", 0, "%s [%s] %s", (facility, client, text), None
        )

    passed = []
    for second in range(12):
        clock.now = float(second)
        for client in ("cadenza#consumer-1", "cadenza#producer-2"):
            record = line("FAIL", client, f"connect failed at {second}")
            if repeats.filter(record):
                passed.append(record.getMessage())
    clock.now = 12.0
    other = line("SESSTMOUT", "cadenza#consumer-1", "session timed out")
    assert repeats.filter(other)
    assert passed == [
        "FAIL [cadenza#consumer-1] connect failed at 0",
        "FAIL [cadenza#producer-2] connect failed at 0",
        "FAIL [cadenza#consumer-1] connect failed at 10 (9 more like it in the last 10 s not logged)",
        "FAIL [cadenza#producer-2] connect failed at 10 (9 more like it in the last 10 s not logged)",
    ]


def test_statistics_give_the_consumer_lag_of_known_partitions_only() -> None:
    errors = ClientErrors("consumer")
    report = {
        "brokers": {"b1": {"state": "UP"}},
        "topics": {
            "in": {
                "partitions": {
                    "0": {"consumer_lag": 12},
                    "1": {"consumer_lag": -1},  # librdkafka does not know yet
                    "-1": {"consumer_lag": 0},  # its internal unassigned partition
                }
            },
            "out": {"partitions": {"3": {"consumer_lag": 0}}},
        },
    }
    errors.statistics(json.dumps(report))
    assert errors.consumer_lag == {("in", 0): 12, ("out", 3): 0}
    errors.statistics(json.dumps({"brokers": {}, "topics": {"in": {"partitions": "garbled"}}}))
    assert errors.consumer_lag == {("in", 0): 12, ("out", 3): 0}  # a malformed report changes nothing


def test_statistics_sum_the_requests_of_every_broker_and_never_go_down() -> None:
    errors = ClientErrors("producer")
    report = {
        "brokers": {
            "b1": {"state": "UP", "req": {"Produce": 7, "Metadata": 2, "Fetch": 0}},
            "b2": {"state": "UP", "req": {"Produce": 3, "Metadata": 1}},
            ":0/internal": {"state": "UP", "req": {}},
        }
    }
    errors.statistics(json.dumps(report))
    assert errors.requests == {"Produce": 10, "Metadata": 3}
    # b2's connection went (and its counts with it): the totals stay, then grow from there.
    errors.statistics(json.dumps({"brokers": {"b1": {"state": "UP", "req": {"Produce": 8, "Metadata": 4}}}}))
    assert errors.requests == {"Produce": 10, "Metadata": 4}
    errors.statistics(json.dumps({"brokers": {"b1": {"state": "UP", "req": "garbled"}}}))
    assert errors.requests == {"Produce": 10, "Metadata": 4}  # a malformed report changes nothing


def test_an_idle_producer_without_a_connection_is_not_reported_unreachable(
    caplog: pytest.LogCaptureFixture,
) -> None:
    errors = ClientErrors("producer")
    errors.statistics(json.dumps({"brokers": {"b1": {"state": "INIT", "req": {"Produce": 0}}}}))
    assert errors.brokers_up
    assert not [r for r in caplog.records if "no broker connection" in r.getMessage()]
