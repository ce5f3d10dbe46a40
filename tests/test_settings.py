"""Settings: environment variables, validation messages, security pass-through, secrets kept hidden."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from cadenza.errors import ConfigError
from cadenza.infra.kafka.clients import make_admin, make_consumer, producer_config
from cadenza.settings import KafkaSettings, redact

SECRET = "s3cr3t-planted-password"


def sasl_settings(**extra: object) -> KafkaSettings:
    return KafkaSettings.load(
        bootstrap_servers="broker-a:9093,broker-b:9093",
        security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_username="svc-cadenza",
        sasl_password=SECRET,
        **extra,
    )


def test_reads_cadenza_environment_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CADENZA_BOOTSTRAP_SERVERS", "k1:9092, k2:9092")
    monkeypatch.setenv("CADENZA_SECURITY_PROTOCOL", "SASL_PLAINTEXT")
    monkeypatch.setenv("CADENZA_SASL_MECHANISM", "PLAIN")
    monkeypatch.setenv("CADENZA_SASL_USERNAME", "u")
    monkeypatch.setenv("CADENZA_SASL_PASSWORD", SECRET)
    monkeypatch.setenv("CADENZA_SESSION_TIMEOUT_MS", "9000")
    settings = KafkaSettings.load()
    assert settings.bootstrap_servers == "k1:9092,k2:9092"
    assert settings.session_timeout_ms == 9000
    assert settings.client_config() == {
        "bootstrap.servers": "k1:9092,k2:9092",
        "client.id": "cadenza",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "u",
        "sasl.password": SECRET,
    }


def test_ssl_files_reach_the_client_config(tmp_path: Path) -> None:
    ca, cert, key = (tmp_path / n for n in ("ca.pem", "cert.pem", "key.pem"))
    for path in (ca, cert, key):
        path.write_text("x")
    settings = KafkaSettings.load(
        security_protocol="SSL",
        ssl_ca_location=ca,
        ssl_certificate_location=cert,
        ssl_key_location=key,
        ssl_key_password=SECRET,
    )
    config = settings.client_config()
    assert config["ssl.ca.location"] == str(ca)
    assert config["ssl.certificate.location"] == str(cert)
    assert config["ssl.key.location"] == str(key)
    assert config["ssl.key.password"] == SECRET
    assert redact(config)["ssl.key.password"] == "**********"


def test_every_client_factory_carries_the_security_settings() -> None:
    settings = sasl_settings()
    config, _ = producer_config(settings)
    assert config["sasl.password"] == SECRET
    assert config["security.protocol"] == "SASL_SSL"
    assert config["enable.idempotence"] is True
    # Creating consumer and admin clients validates the whole config inside librdkafka (no I/O yet).
    consumer, _ = make_consumer(settings, group_id="g")
    consumer.close()
    make_admin(settings)


def test_linger_ms_sets_the_producer_config_linger(monkeypatch: pytest.MonkeyPatch) -> None:
    """Outputs, repartition topics and changelogs share producer_config: one setting batches them all
    (a caller's own ``linger.ms`` still wins, as the span sink's does)."""
    assert producer_config(KafkaSettings.load())[0]["linger.ms"] == 5  # librdkafka's batching as before
    monkeypatch.setenv("CADENZA_LINGER_MS", "100")
    config, _ = producer_config(KafkaSettings.load())
    assert config["linger.ms"] == 100
    assert producer_config(KafkaSettings.load(), **{"linger.ms": 2})[0]["linger.ms"] == 2  # overrides win


def test_secrets_never_appear_in_repr_str_or_errors(caplog: pytest.LogCaptureFixture) -> None:
    settings = sasl_settings()
    assert SECRET not in repr(settings)
    assert SECRET not in str(settings)
    assert SECRET not in settings.model_dump_json()
    assert SECRET not in str(redact(settings.client_config()))
    with pytest.raises(ConfigError) as excinfo:
        KafkaSettings.load(bootstrap_servers="not a host", sasl_password=SECRET)
    assert SECRET not in str(excinfo.value)
    with pytest.raises(ConfigError) as excinfo:
        KafkaSettings.load(security_protocol="SASL_SSL", sasl_mechanism="PLAIN", sasl_password=SECRET)
    assert SECRET not in str(excinfo.value)
    with caplog.at_level(logging.DEBUG):
        logging.getLogger("cadenza").info("settings: %r", settings)
    assert SECRET not in caplog.text


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"bootstrap_servers": "localhost"},
            "bootstrap_servers (CADENZA_BOOTSTRAP_SERVERS): bootstrap server",
        ),
        ({"bootstrap_servers": "h:99999"}, "is not host:port"),
        ({"bootstrap_servers": " , "}, "bootstrap_servers is empty"),
        ({"security_protocol": "TLS"}, "security_protocol (CADENZA_SECURITY_PROTOCOL)"),
        ({"security_protocol": "SASL_SSL"}, "needs sasl_mechanism"),
        (
            {"security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN"},
            "needs sasl_username and sasl_password",
        ),
        ({"sasl_username": "u"}, "SASL settings are given but security_protocol=PLAINTEXT"),
        ({"security_protocol": "SSL", "ssl_ca_location": "/no/such/ca.pem"}, "does not exist"),
        ({"session_timeout_ms": 10}, "session_timeout_ms (CADENZA_SESSION_TIMEOUT_MS)"),
        ({"linger_ms": 1001}, "linger_ms (CADENZA_LINGER_MS)"),
        ({"linger_ms": -1}, "linger_ms (CADENZA_LINGER_MS)"),
    ],
)
def test_invalid_settings_fail_at_start_with_a_clear_message(
    overrides: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError) as excinfo:
        KafkaSettings.load(**overrides)
    assert message in str(excinfo.value)
    assert str(excinfo.value).startswith("invalid cadenza settings:")
