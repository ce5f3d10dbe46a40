"""Options of the ``cadenza-kafka`` Spark source and sink, parsed and checked on the driver.

Option names follow Spark's native Kafka connector (``kafka.bootstrap.servers``, ``subscribe``,
``startingOffsets``...) so a query can switch between the two formats by changing only ``format()``.
Everything is validated where the user sees it (``load()``, ``start()``), never first on an executor
halfway through a batch. Connection settings go through :class:`~cadenza.settings.KafkaSettings`, so
the same validation and secret handling apply as everywhere else in cadenza.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast

from pydantic import PrivateAttr, ValidationError

from cadenza.errors import ConfigError
from cadenza.settings import KafkaSettings, redact

#: The format name the Python data source registers under.
FORMAT_NAME = "cadenza-kafka"

#: ``kafka.*`` options that map onto KafkaSettings fields (validated, secrets kept secret).
_SETTINGS_KEYS = {
    "bootstrap.servers": "bootstrap_servers",
    "security.protocol": "security_protocol",
    "sasl.mechanism": "sasl_mechanism",
    "sasl.mechanisms": "sasl_mechanism",
    "sasl.username": "sasl_username",
    "sasl.password": "sasl_password",
    "ssl.ca.location": "ssl_ca_location",
    "ssl.certificate.location": "ssl_certificate_location",
    "ssl.key.location": "ssl_key_location",
    "ssl.key.password": "ssl_key_password",
    "client.id": "client_id",
    "request.timeout.ms": "request_timeout_ms",
    "delivery.timeout.ms": "delivery_timeout_ms",
}

#: ``kafka.*`` options cadenza must control; the reason is part of the error.
_REFUSED_KEYS = {
    "group.id": "the source assigns partitions with explicit offsets and never joins a group",
    "auto.offset.reset": "use the startingOffsets option",
    "enable.auto.commit": "offsets live in Spark's checkpoint, not in Kafka",
    "enable.idempotence": "the sink's producer is always idempotent",
    "key.serializer": "keys are written as bytes (cast the key column to string or binary)",
    "value.serializer": "values are written as bytes (cast the value column to string or binary)",
    "key.deserializer": "keys are read as binary; cast in Spark",
    "value.deserializer": "values are read as binary; cast in Spark",
    "sasl.jaas.config": (
        "it is a Java client setting; cadenza-kafka uses librdkafka: give kafka.sasl.mechanism, "
        "kafka.sasl.username and kafka.sasl.password"
    ),
}

Offsets = dict[str, dict[str, int]]
"""Spark-checkpointed offsets: ``{topic: {partition (as a string, JSON keys are strings): offset}}``."""

TopicPartitionKey = tuple[str, int]

#: Spark's convention in startingOffsets JSON.
LATEST = -1
EARLIEST = -2


class SparkKafkaSettings(KafkaSettings):
    """KafkaSettings plus raw librdkafka overrides from ``kafka.*`` options.

    The overrides are added by :meth:`client_config`, so every cadenza client factory (including
    :func:`cadenza.infra.kafka.offsets.end_offsets`) honours them, e.g. an extra ``ssl.*`` setting.
    They are a private attribute: not read from the environment and not shown in reprs.
    """

    _overrides: dict[str, str] = PrivateAttr(default_factory=dict)

    def client_config(self) -> dict[str, str]:
        config = super().client_config()
        config.update(self._overrides)
        return config

    @property
    def overrides(self) -> dict[str, str]:
        return dict(self._overrides)


def _normalized(options: Mapping[str, str]) -> dict[str, str]:
    # Spark hands data sources a case-insensitive dict with lower-cased keys; direct callers may not.
    return {str(key).lower(): str(value) for key, value in options.items()}


def kafka_settings_from_options(options: Mapping[str, str]) -> SparkKafkaSettings:
    """Connection settings from ``kafka.*`` options, falling back to the ``CADENZA_*`` environment.

    ``bootstrap.servers`` (without the prefix) is accepted too, as the short form people type; the
    ``kafka.`` form wins when both are given.
    Unknown ``kafka.*`` keys pass through to librdkafka unchanged.
    """
    opts = _normalized(options)
    fields: dict[str, Any] = {}
    overrides: dict[str, str] = {}
    if "bootstrap.servers" in opts:
        fields["bootstrap_servers"] = opts["bootstrap.servers"]
    for key, value in opts.items():
        if not key.startswith("kafka."):
            continue
        name = key.removeprefix("kafka.")
        if name in _REFUSED_KEYS:
            raise ConfigError(f"option {key} is not supported by {FORMAT_NAME}: {_REFUSED_KEYS[name]}")
        if name in _SETTINGS_KEYS:
            fields[_SETTINGS_KEYS[name]] = value
        else:
            overrides[name] = value
    try:
        settings = SparkKafkaSettings(**fields)
    except ValidationError as exc:
        raise ConfigError(_describe_invalid(exc)) from None
    settings._overrides = overrides
    return settings


def _describe_invalid(exc: ValidationError) -> str:
    """One line per bad setting naming both the option and the environment variable; no values.

    Values are left out because one of them may be a password.
    """
    options = {field: key for key, field in reversed(_SETTINGS_KEYS.items())}
    lines = [f"invalid {FORMAT_NAME} connection options:"]
    for error in exc.errors(include_input=False, include_url=False):
        field = ".".join(str(part) for part in error["loc"])
        message = str(error["msg"]).removeprefix("Value error, ")
        where = f"kafka.{options[field]} (or CADENZA_{field.upper()})" if field in options else "options"
        lines.append(f"  - {where}: {message}")
    return "\n".join(lines)


def describe_connection(settings: KafkaSettings) -> str:
    """The client config as a loggable string; passwords replaced by stars."""
    return ", ".join(f"{key}={value}" for key, value in sorted(redact(settings.client_config()).items()))


@dataclass(frozen=True)
class SourceOptions:
    """The parsed reader options; picklable, because the reader travels to Spark's Python workers."""

    settings: SparkKafkaSettings
    subscribe: tuple[str, ...]
    subscribe_pattern: str | None
    starting: Literal["earliest", "latest"] | dict[TopicPartitionKey, int]
    max_records_per_trigger: int | None
    fail_on_data_loss: bool
    poll_timeout_s: float
    include_headers: bool

    def matches(self, topic: str) -> bool:
        """Whether ``topic`` is subscribed (by name or by full match of the pattern)."""
        if self.subscribe_pattern is not None:
            # Like Kafka's pattern subscription: a full match, internal topics excluded.
            return not topic.startswith("__") and re.fullmatch(self.subscribe_pattern, topic) is not None
        return topic in self.subscribe


def parse_source_options(options: Mapping[str, str]) -> SourceOptions:
    """Check the reader options; a ConfigError names the option and the fix."""
    opts = _normalized(options)
    subscribe = tuple(t.strip() for t in opts.get("subscribe", "").split(",") if t.strip())
    pattern = opts.get("subscribepattern")
    if "assign" in opts:
        raise ConfigError(
            f"option assign is not supported by {FORMAT_NAME}; use subscribe or subscribePattern"
        )
    if subscribe and pattern is not None:
        raise ConfigError("give either subscribe or subscribePattern, not both")
    if not subscribe and not pattern:
        raise ConfigError(
            f"{FORMAT_NAME} needs the topics to read: option subscribe (comma-separated topic names) "
            "or subscribePattern (a regular expression over topic names)"
        )
    if pattern is not None:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ConfigError(
                f"subscribePattern {pattern!r} is not a valid regular expression: {exc}"
            ) from None
    starting = _parse_starting_offsets(opts.get("startingoffsets", "latest"))
    if isinstance(starting, dict) and subscribe:
        unknown = sorted({topic for topic, _ in starting} - set(subscribe))
        if unknown:
            raise ConfigError(f"startingOffsets names topics that are not subscribed: {', '.join(unknown)}")
    max_records = opts.get("maxrecordspertrigger", opts.get("maxoffsetspertrigger"))
    return SourceOptions(
        settings=kafka_settings_from_options(opts),
        subscribe=subscribe,
        subscribe_pattern=pattern,
        starting=starting,
        max_records_per_trigger=None
        if max_records is None
        else _positive_int("maxRecordsPerTrigger", max_records),
        fail_on_data_loss=_bool("failOnDataLoss", opts.get("failondataloss", "true")),
        poll_timeout_s=_positive_int(
            "kafkaConsumer.pollTimeoutMs", opts.get("kafkaconsumer.polltimeoutms", "60000")
        )
        / 1000,
        include_headers=_bool("includeHeaders", opts.get("includeheaders", "true")),
    )


def _parse_starting_offsets(text: str) -> Literal["earliest", "latest"] | dict[TopicPartitionKey, int]:
    value = text.strip()
    if value.lower() in ("earliest", "latest"):
        return cast(Literal["earliest", "latest"], value.lower())
    example = '{"topic-a": {"0": 23, "1": -2}, "topic-b": {"0": -1}}'
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"startingOffsets must be earliest, latest or JSON like {example} "
            f"(-2 = earliest, -1 = latest); got {value!r}: {exc.msg}"
        ) from None
    if not isinstance(parsed, dict) or not parsed:
        raise ConfigError(f"startingOffsets JSON must be a non-empty object like {example}; got {value!r}")
    result: dict[TopicPartitionKey, int] = {}
    for topic, partitions in parsed.items():
        if not isinstance(partitions, dict) or not partitions:
            raise ConfigError(
                f"startingOffsets: topic {topic!r} must map partition numbers to offsets, like {example}"
            )
        for partition, offset in partitions.items():
            if not str(partition).isdigit():
                raise ConfigError(
                    f"startingOffsets: topic {topic!r} has a bad partition number {partition!r}"
                )
            if not isinstance(offset, int) or isinstance(offset, bool) or offset < EARLIEST:
                raise ConfigError(
                    f"startingOffsets: {topic}[{partition}] has a bad offset {offset!r}; "
                    "use an offset >= 0, -2 for earliest or -1 for latest"
                )
            result[(topic, int(partition))] = offset
    return result


@dataclass(frozen=True)
class SinkOptions:
    """The parsed writer options; picklable, because the writer travels to Spark's Python workers."""

    settings: SparkKafkaSettings
    topic: str | None
    flush_timeout_s: float


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    """Check the writer options; the topic may also come from a ``topic`` column (checked later)."""
    opts = _normalized(options)
    settings = kafka_settings_from_options(opts)
    topic = opts.get("topic")
    if topic is not None and not topic.strip():
        raise ConfigError(
            "option topic is empty; give a topic name or drop the option and use a topic column"
        )
    return SinkOptions(
        settings=settings,
        topic=topic.strip() if topic else None,
        # librdkafka gives up on a record after delivery.timeout.ms; flushing a little longer than
        # that means a failure is reported by librdkafka itself, with its error code.
        flush_timeout_s=settings.delivery_timeout_ms / 1000 + 5,
    )


def _positive_int(name: str, text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(f"option {name} must be a positive integer; got {text!r}") from None
    if value <= 0:
        raise ConfigError(f"option {name} must be a positive integer; got {text!r}")
    return value


def _bool(name: str, text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise ConfigError(f"option {name} must be true or false; got {text!r}")


def offsets_to_json(positions: Mapping[TopicPartitionKey, int]) -> Offsets:
    """Positions as Spark's checkpointed offset: sorted, so the same positions give the same JSON.

    Spark compares offsets by their JSON text to decide "no new data" (and so when an availableNow
    query ends); a different key order for the same positions would look like progress forever.
    """
    result: Offsets = {}
    for topic, partition in sorted(positions):
        result.setdefault(topic, {})[str(partition)] = positions[(topic, partition)]
    return result


def offsets_from_json(offsets: Mapping[str, Any]) -> dict[TopicPartitionKey, int]:
    """The inverse of :func:`offsets_to_json`, checking the shape (a checkpoint may be hand-edited)."""
    result: dict[TopicPartitionKey, int] = {}
    for topic, partitions in offsets.items():
        if not isinstance(partitions, Mapping):
            raise ConfigError(
                f"offset for topic {topic!r} is not an object of partition -> offset: {offsets!r}"
            )
        for partition, offset in partitions.items():
            if not isinstance(offset, int) or offset < 0:
                raise ConfigError(f"offset {offset!r} of {topic}[{partition}] is not a non-negative integer")
            result[(str(topic), int(partition))] = offset
    return result
