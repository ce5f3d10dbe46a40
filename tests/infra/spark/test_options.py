"""Option parsing, offsets JSON and the per-trigger budget: pure logic, no Spark session, no broker."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import SecretStr

from cadenza.errors import ConfigError
from cadenza.infra.spark.datasource import kafka_options
from cadenza.infra.spark.kafka_source import spread_budget
from cadenza.infra.spark.options import (
    describe_connection,
    kafka_settings_from_options,
    offsets_from_json,
    offsets_to_json,
    parse_sink_options,
    parse_source_options,
)
from cadenza.settings import KafkaSettings, SaslMechanism, SecurityProtocol


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "cadenza-kafka needs the topics to read: option subscribe (comma-separated topic names)"),
        ({"subscribe": " , "}, "cadenza-kafka needs the topics to read"),
        (
            {"subscribe": "a", "subscribePattern": "b.*"},
            "give either subscribe or subscribePattern, not both",
        ),
        ({"subscribePattern": "(unclosed"}, "subscribePattern '(unclosed' is not a valid regular expression"),
        ({"assign": '{"a": [0]}'}, "option assign is not supported by cadenza-kafka"),
        (
            {"subscribe": "a", "startingOffsets": "{not json"},
            "startingOffsets must be earliest, latest or JSON like",
        ),
        ({"subscribe": "a", "startingOffsets": "[1]"}, "startingOffsets JSON must be a non-empty object"),
        (
            {"subscribe": "a", "startingOffsets": '{"a": 5}'},
            "startingOffsets: topic 'a' must map partition numbers",
        ),
        (
            {"subscribe": "a", "startingOffsets": '{"a": {"x": 1}}'},
            "topic 'a' has a bad partition number 'x'",
        ),
        (
            {"subscribe": "a", "startingOffsets": '{"a": {"0": "x"}}'},
            "startingOffsets: a[0] has a bad offset 'x'",
        ),
        ({"subscribe": "a", "startingOffsets": '{"a": {"0": -3}}'}, "a[0] has a bad offset -3"),
        (
            {"subscribe": "a", "startingOffsets": '{"b": {"0": 1}}'},
            "startingOffsets names topics that are not subscribed: b",
        ),
        (
            {"subscribe": "a", "maxRecordsPerTrigger": "0"},
            "option maxRecordsPerTrigger must be a positive integer",
        ),
        (
            {"subscribe": "a", "maxOffsetsPerTrigger": "many"},
            "option maxRecordsPerTrigger must be a positive integer",
        ),
        ({"subscribe": "a", "failOnDataLoss": "maybe"}, "option failOnDataLoss must be true or false"),
        (
            {"subscribe": "a", "kafka.group.id": "g"},
            "option kafka.group.id is not supported by cadenza-kafka",
        ),
        (
            {"subscribe": "a", "kafka.sasl.jaas.config": "x"},
            "it is a Java client setting; cadenza-kafka uses librdkafka",
        ),
        (
            {"subscribe": "a", "kafka.bootstrap.servers": "nohost"},
            "kafka.bootstrap.servers (or CADENZA_BOOTSTRAP_SERVERS)",
        ),
    ],
)
def test_bad_source_options_are_refused_with_the_fix(options: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_source_options(options)
    assert message in str(caught.value)


def test_source_options_like_the_native_connector() -> None:
    options = parse_source_options(
        {
            "kafka.bootstrap.servers": "b1:9092,b2:9092",
            "subscribe": "orders, payments",
            "startingOffsets": '{"orders": {"0": 5, "1": -2}, "payments": {"0": -1}}',
            "maxOffsetsPerTrigger": "100",
            "failOnDataLoss": "false",
            "kafkaConsumer.pollTimeoutMs": "5000",
        }
    )
    assert options.settings.bootstrap_servers == "b1:9092,b2:9092"
    assert options.subscribe == ("orders", "payments")
    assert options.starting == {("orders", 0): 5, ("orders", 1): -2, ("payments", 0): -1}
    assert options.max_records_per_trigger == 100
    assert not options.fail_on_data_loss
    assert options.poll_timeout_s == 5.0
    assert options.matches("orders") and not options.matches("orders2")


def test_subscribe_pattern_is_a_full_match_and_skips_internal_topics() -> None:
    options = parse_source_options({"subscribePattern": "clicks-.*", "startingOffsets": "EARLIEST"})
    assert options.starting == "earliest"
    assert options.matches("clicks-eu")
    assert not options.matches("old-clicks-eu")
    assert not parse_source_options({"subscribePattern": ".*"}).matches("__consumer_offsets")


def test_security_options_reach_librdkafka_and_the_password_stays_hidden(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("not a real CA")
    settings = kafka_settings_from_options(
        {
            "kafka.bootstrap.servers": "broker:9093",
            "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.mechanism": "SCRAM-SHA-512",
            "kafka.sasl.username": "alice",
            "kafka.sasl.password": "s3cr3t-pw",
            "kafka.ssl.ca.location": str(ca),
            "kafka.ssl.endpoint.identification.algorithm": "none",
        }
    )
    config = settings.client_config()
    assert config["security.protocol"] == "SASL_SSL"
    assert config["sasl.mechanism"] == "SCRAM-SHA-512"
    assert config["sasl.username"] == "alice"
    assert config["sasl.password"] == "s3cr3t-pw"
    assert config["ssl.ca.location"] == str(ca)
    assert config["ssl.endpoint.identification.algorithm"] == "none"  # unknown kafka.* pass through
    assert "s3cr3t-pw" not in repr(settings)
    assert "s3cr3t-pw" not in describe_connection(settings)
    assert "sasl.password=**********" in describe_connection(settings)


def test_invalid_security_options_name_the_option_and_never_the_password() -> None:
    with pytest.raises(ConfigError) as caught:
        kafka_settings_from_options(
            {
                "kafka.security.protocol": "SASL_SSL",
                "kafka.sasl.username": "alice",
                "kafka.sasl.password": "pw-123",
            }
        )
    assert "needs sasl_mechanism" in str(caught.value)
    assert "pw-123" not in str(caught.value)


def test_options_fall_back_to_the_cadenza_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CADENZA_BOOTSTRAP_SERVERS", "from-env:9092")
    assert kafka_settings_from_options({}).bootstrap_servers == "from-env:9092"
    assert kafka_settings_from_options({"bootstrap.servers": "opt:1"}).bootstrap_servers == "opt:1"
    assert kafka_settings_from_options({"KAFKA.BOOTSTRAP.SERVERS": "upper:2"}).bootstrap_servers == "upper:2"


def test_sink_options() -> None:
    assert parse_sink_options({"topic": " out "}).topic == "out"
    assert parse_sink_options({}).topic is None
    with pytest.raises(ConfigError, match="option topic is empty"):
        parse_sink_options({"topic": "  "})
    assert parse_sink_options({"kafka.delivery.timeout.ms": "2000"}).flush_timeout_s == 7.0


def test_offsets_json_is_canonical_so_equal_positions_compare_equal() -> None:
    positions = {("b", 10): 1, ("a", 2): 7, ("b", 9): 3, ("a", 10): 0}
    as_json = offsets_to_json(positions)
    assert list(as_json) == ["a", "b"]
    assert list(as_json["a"]) == ["2", "10"]
    assert offsets_to_json(dict(reversed(list(positions.items())))) == as_json
    assert offsets_from_json(as_json) == positions
    with pytest.raises(ConfigError, match="is not a non-negative integer"):
        offsets_from_json({"a": {"0": -1}})


@pytest.mark.parametrize(
    ("lags", "budget", "expected"),
    [
        ({("t", 0): 10, ("t", 1): 10}, 100, {("t", 0): 10, ("t", 1): 10}),
        ({("t", 0): 10, ("t", 1): 10}, 10, {("t", 0): 5, ("t", 1): 5}),
        ({("t", 0): 2, ("t", 1): 30, ("t", 2): 30}, 20, {("t", 0): 2, ("t", 1): 9, ("t", 2): 9}),
        ({("t", 0): 0, ("t", 1): 7}, 3, {("t", 0): 0, ("t", 1): 3}),
        ({("t", 0): 5, ("t", 1): 5, ("t", 2): 5}, 1, {("t", 0): 1, ("t", 1): 0, ("t", 2): 0}),
    ],
)
def test_spread_budget_is_fair_and_never_exceeds_the_budget(
    lags: dict[tuple[str, int], int], budget: int, expected: dict[tuple[str, int], int]
) -> None:
    taken = spread_budget(lags, budget)
    assert taken == expected
    assert sum(taken.values()) <= budget
    assert all(0 <= taken[tp] <= lags[tp] for tp in lags)


def test_kafka_options_round_trip_through_the_cadenza_format(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("ca")
    settings = KafkaSettings(
        bootstrap_servers="b:9093",
        security_protocol=SecurityProtocol.SASL_SSL,
        sasl_mechanism=SaslMechanism.PLAIN,
        sasl_username="alice",
        sasl_password=SecretStr("pw"),
        ssl_ca_location=ca,
        client_id="stats",
    )
    options = kafka_options(settings)
    assert options["kafka.sasl.password"] == "pw"
    assert kafka_settings_from_options(options).client_config() == settings.client_config()


def test_kafka_options_for_the_native_connector_speak_the_java_client(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("ca")
    settings = KafkaSettings(
        bootstrap_servers="b:9093",
        security_protocol=SecurityProtocol.SASL_SSL,
        sasl_mechanism=SaslMechanism.SCRAM_SHA_512,
        sasl_username="alice",
        sasl_password=SecretStr('p"w\\x'),
        ssl_ca_location=ca,
    )
    assert kafka_options(settings, "kafka") == {
        "kafka.bootstrap.servers": "b:9093",
        "kafka.client.id": "cadenza",
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": (
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            'username="alice" password="p\\"w\\\\x";'
        ),
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.location": str(ca),
    }
    with pytest.raises(ConfigError, match="unknown format 'kafka2'"):
        kafka_options(settings, "kafka2")
