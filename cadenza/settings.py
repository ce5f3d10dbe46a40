"""Connection settings shared by every Kafka client cadenza creates.

One pydantic-settings model, read from ``CADENZA_*`` environment variables (or passed in code), is the
single place where bootstrap servers and security settings live. Every producer, consumer and admin
client is built from :meth:`KafkaSettings.client_config`, so a SASL/SSL setting given once reaches all
of them. Secrets are ``SecretStr``: they print as ``**********`` in reprs, logs and validation errors,
and are revealed only in the dict handed to librdkafka.
"""

from __future__ import annotations

import re
from enum import StrEnum
from pathlib import Path
from typing import Any, Self

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from cadenza.errors import ConfigError

_HOST_PORT = re.compile(r"^(\[[0-9a-fA-F:]+\]|[A-Za-z0-9._-]+):(\d{1,5})$")

#: Keys whose values must never be shown; used by :func:`redact`.
SECRET_CONFIG_KEYS = frozenset(
    {"sasl.password", "ssl.key.password", "ssl.keystore.password", "basic.auth.user.info"}
)

_REGISTRY_URL = re.compile(r"^https?://(\[[0-9a-fA-F:]+\]|[A-Za-z0-9._-]+)(:\d{1,5})?(/[^\s@]*)?$")


class SecurityProtocol(StrEnum):
    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"


class SaslMechanism(StrEnum):
    PLAIN = "PLAIN"
    SCRAM_SHA_256 = "SCRAM-SHA-256"
    SCRAM_SHA_512 = "SCRAM-SHA-512"
    OAUTHBEARER = "OAUTHBEARER"
    GSSAPI = "GSSAPI"


class KafkaSettings(BaseSettings):
    """Where the Kafka cluster is and how to authenticate to it.

    Environment variables: ``CADENZA_BOOTSTRAP_SERVERS``, ``CADENZA_SECURITY_PROTOCOL``,
    ``CADENZA_SASL_MECHANISM``, ``CADENZA_SASL_USERNAME``, ``CADENZA_SASL_PASSWORD``,
    ``CADENZA_SSL_CA_LOCATION``, ``CADENZA_SSL_CERTIFICATE_LOCATION``, ``CADENZA_SSL_KEY_LOCATION``,
    ``CADENZA_SSL_KEY_PASSWORD``, ``CADENZA_CLIENT_ID``, ``CADENZA_SESSION_TIMEOUT_MS``,
    ``CADENZA_REQUEST_TIMEOUT_MS``, ``CADENZA_DELIVERY_TIMEOUT_MS``, ``CADENZA_LINGER_MS``,
    ``CADENZA_SCHEMA_REGISTRY_URL``,
    ``CADENZA_SCHEMA_REGISTRY_USERNAME``, ``CADENZA_SCHEMA_REGISTRY_PASSWORD``.
    """

    model_config = SettingsConfigDict(env_prefix="CADENZA_", extra="ignore", validate_default=True)

    bootstrap_servers: str = Field(
        default="127.0.0.1:9092",
        description="Comma-separated host:port list of the brokers to bootstrap from.",
    )
    security_protocol: SecurityProtocol = Field(
        default=SecurityProtocol.PLAINTEXT, description="librdkafka security.protocol."
    )
    sasl_mechanism: SaslMechanism | None = Field(default=None, description="SASL mechanism.")
    sasl_username: str | None = Field(default=None, description="SASL user name.")
    sasl_password: SecretStr | None = Field(default=None, description="SASL password (never logged).")
    ssl_ca_location: Path | None = Field(default=None, description="CA bundle to verify the brokers.")
    ssl_certificate_location: Path | None = Field(default=None, description="Client certificate (mTLS).")
    ssl_key_location: Path | None = Field(default=None, description="Client private key (mTLS).")
    ssl_key_password: SecretStr | None = Field(default=None, description="Private key password.")
    client_id: str = Field(default="cadenza", description="client.id reported to the brokers.")
    session_timeout_ms: int = Field(
        default=6000,
        ge=1000,
        le=300_000,
        description=(
            "Consumer group session timeout. Short by default: some brokers (Tansu) make a group "
            "join take about half of it, and a short timeout also detects dead workers sooner."
        ),
    )
    request_timeout_ms: int = Field(default=30_000, ge=1000, description="Admin/metadata request timeout.")
    delivery_timeout_ms: int = Field(
        default=30_000,
        ge=1000,
        description=(
            "How long the producer keeps retrying one record before failing it. librdkafka's default "
            "(5 minutes) hides an unreachable cluster for too long."
        ),
    )
    linger_ms: int = Field(
        default=5,
        ge=0,
        le=1000,
        description=(
            "How long cadenza's producers (outputs, repartition topics, changelogs) wait to fill a "
            "record batch. A longer wait adds that much latency to every output but sends fewer, "
            "larger batches: brokers pay per batch (the embedded one especially, see "
            "docs/how-to/embedded-broker.md)."
        ),
    )

    schema_registry_url: str | None = Field(
        default=None,
        description=(
            "Confluent Schema Registry URL (http(s)://host:port[/path]); when set, Avro topics use the "
            "registry wire format."
        ),
    )
    schema_registry_username: str | None = Field(
        default=None, description="Schema Registry basic-auth user (API key)."
    )
    schema_registry_password: SecretStr | None = Field(
        default=None, description="Schema Registry basic-auth password (API secret; never logged)."
    )

    @field_validator("schema_registry_url")
    @classmethod
    def _check_registry_url(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        url = value.strip().rstrip("/")
        if not _REGISTRY_URL.match(url):
            raise ValueError(
                "schema_registry_url must be http(s)://host[:port][/path] (e.g. http://127.0.0.1:8081), "
                "without credentials (use schema_registry_username/password)"
            )
        return url

    @field_validator("bootstrap_servers")
    @classmethod
    def _check_bootstrap(cls, value: str) -> str:
        servers = [part.strip() for part in value.split(",") if part.strip()]
        if not servers:
            raise ValueError("bootstrap_servers is empty; give host:port[,host:port...]")
        for server in servers:
            # librdkafka accepts an optional scheme such as PLAINTEXT://; strip it for the check.
            address = server.split("://", 1)[-1]
            match = _HOST_PORT.match(address)
            if "@" in address:  # user:password@host: the value must not be echoed
                raise ValueError(
                    "a bootstrap server carries credentials (user@host); give host:port only and put "
                    "credentials in CADENZA_SASL_USERNAME and CADENZA_SASL_PASSWORD"
                )
            if match is None or not 0 < int(match.group(2)) < 65536:
                raise ValueError(f"bootstrap server {server!r} is not host:port (e.g. 127.0.0.1:9092)")
        return ",".join(servers)

    @model_validator(mode="after")
    def _check_security(self) -> Self:
        uses_sasl = self.security_protocol in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL)
        uses_ssl = self.security_protocol in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL)
        if uses_sasl and self.sasl_mechanism is None:
            raise ValueError(f"security_protocol={self.security_protocol} needs sasl_mechanism")
        needs_password = self.sasl_mechanism in (
            SaslMechanism.PLAIN,
            SaslMechanism.SCRAM_SHA_256,
            SaslMechanism.SCRAM_SHA_512,
        )
        if uses_sasl and needs_password and (self.sasl_username is None or self.sasl_password is None):
            raise ValueError(f"sasl_mechanism={self.sasl_mechanism} needs sasl_username and sasl_password")
        if not uses_sasl and (self.sasl_mechanism or self.sasl_username or self.sasl_password):
            raise ValueError(
                f"SASL settings are given but security_protocol={self.security_protocol}; "
                "use SASL_PLAINTEXT or SASL_SSL"
            )
        ssl_files = (self.ssl_ca_location, self.ssl_certificate_location, self.ssl_key_location)
        if not uses_ssl and any(ssl_files):
            raise ValueError(
                f"SSL files are given but security_protocol={self.security_protocol}; use SSL or SASL_SSL"
            )
        for path in ssl_files:
            if path is not None and not path.is_file():
                raise ValueError(f"SSL file {str(path)!r} does not exist or is not a file")
        if (self.ssl_certificate_location is None) != (self.ssl_key_location is None):
            raise ValueError("ssl_certificate_location and ssl_key_location must be given together")
        if (self.schema_registry_username is None) != (self.schema_registry_password is None):
            raise ValueError("schema_registry_username and schema_registry_password must be given together")
        if self.schema_registry_username is not None and self.schema_registry_url is None:
            raise ValueError("Schema Registry credentials are given but schema_registry_url is not")
        return self

    @classmethod
    def load(cls, **overrides: Any) -> KafkaSettings:
        """Read settings from the environment plus ``overrides``; raise ConfigError with a clear text.

        pydantic's ValidationError is turned into one message per bad field, naming the environment
        variable the user would set; secret values never appear in it.
        """
        try:
            return cls(**{k: v for k, v in overrides.items() if v is not None})
        except ValidationError as exc:
            raise ConfigError(describe_validation_error(exc, env_prefix="CADENZA_")) from None

    def client_config(self) -> dict[str, str]:
        """The librdkafka settings common to every client; secrets are revealed only here."""
        config: dict[str, str] = {
            "bootstrap.servers": self.bootstrap_servers,
            "client.id": self.client_id,
            "security.protocol": self.security_protocol.value,
        }
        if self.sasl_mechanism is not None:
            config["sasl.mechanism"] = self.sasl_mechanism.value
        if self.sasl_username is not None:
            config["sasl.username"] = self.sasl_username
        if self.sasl_password is not None:
            config["sasl.password"] = self.sasl_password.get_secret_value()
        if self.ssl_ca_location is not None:
            config["ssl.ca.location"] = str(self.ssl_ca_location)
        if self.ssl_certificate_location is not None:
            config["ssl.certificate.location"] = str(self.ssl_certificate_location)
        if self.ssl_key_location is not None:
            config["ssl.key.location"] = str(self.ssl_key_location)
        if self.ssl_key_password is not None:
            config["ssl.key.password"] = self.ssl_key_password.get_secret_value()
        return config

    def schema_registry_config(self) -> dict[str, str] | None:
        """The Schema Registry client's settings, or ``None`` without a URL; the secret is revealed
        only here. The CA bundle given for the brokers verifies the registry too."""
        if self.schema_registry_url is None:
            return None
        config = {"url": self.schema_registry_url}
        if self.schema_registry_username is not None and self.schema_registry_password is not None:
            password = self.schema_registry_password.get_secret_value()
            config["basic.auth.user.info"] = f"{self.schema_registry_username}:{password}"
        if self.ssl_ca_location is not None and self.schema_registry_url.startswith("https://"):
            config["ssl.ca.location"] = str(self.ssl_ca_location)
        return config


def redact(config: dict[str, str]) -> dict[str, str]:
    """A copy of a librdkafka config safe to log: secret values replaced by ``**********``."""
    return {key: ("**********" if key in SECRET_CONFIG_KEYS else value) for key, value in config.items()}


def describe_validation_error(exc: ValidationError, *, env_prefix: str) -> str:
    """One line per bad setting, naming the environment variable; input values are left out.

    Input values are omitted on purpose: a malformed password must not end up in a terminal or a log.
    """
    lines = ["invalid cadenza settings:"]
    for error in exc.errors(include_input=False, include_url=False):
        location = ".".join(str(part) for part in error["loc"])
        where = f"{location} ({env_prefix}{location.upper()})" if location else "settings"
        message = str(error["msg"]).removeprefix("Value error, ")
        lines.append(f"  - {where}: {message}")
    return "\n".join(lines)
