"""Kafka failures as cadenza exceptions with messages a person can act on.

librdkafka retries most things internally and forever unless told otherwise; cadenza bounds every
wait (delivery, metadata, admin) and turns the outcome into one of these, so a worker fails loudly
instead of hanging on an unreachable or misconfigured cluster.
"""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException

from cadenza.errors import CadenzaError


class KafkaClientError(CadenzaError):
    """A Kafka operation failed; ``code`` is librdkafka's error name when there is one."""

    def __init__(self, message: str, *, code: str | None = None, retriable: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.retriable = retriable


class BrokerUnavailableError(KafkaClientError):
    """No broker answered within the deadline."""


class DeliveryError(KafkaClientError):
    """Records were not acknowledged by the cluster."""


class TopicError(KafkaClientError):
    """A topic could not be created, or exists with a shape that does not fit."""


def from_kafka_error(error: KafkaError, context: str) -> KafkaClientError:
    """Wrap a librdkafka error, keeping its name and saying what cadenza was doing."""
    name = error.name()
    message = f"{context}: {name}: {error.str()}"
    if error.code() in (KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT, KafkaError._TIMED_OUT):
        return BrokerUnavailableError(message, code=name, retriable=True)
    return KafkaClientError(message, code=name, retriable=bool(error.retriable()))


def from_kafka_exception(exc: KafkaException, context: str) -> KafkaClientError:
    """Wrap a KafkaException raised by confluent-kafka."""
    error = exc.args[0] if exc.args else None
    if isinstance(error, KafkaError):
        return from_kafka_error(error, context)
    return KafkaClientError(f"{context}: {exc}")
