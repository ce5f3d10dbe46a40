"""The produce stage: every record a worker writes (sinks, repartition, changelog, late, dead letter).

One idempotent producer for everything. Its delivery callback is set once on the producer and asked
to report failures only (``delivery.report.only.error``): a successful delivery then costs no Python
call at all, and :meth:`Output.flush` still proves every record was acknowledged, because a flush
returns only when each record was either acknowledged or reported failed.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import KafkaError, Message, Producer

from cadenza.infra.kafka.clients import ClientErrors, make_producer
from cadenza.infra.kafka.errors import DeliveryError
from cadenza.settings import KafkaSettings

__all__ = ["OutHeaders", "Output"]

#: Headers as the producer takes them.
OutHeaders = list[tuple[str, str | bytes | None]]


class Output:
    """Produces asynchronously; :meth:`flush` raises if anything since the last flush was lost."""

    __slots__ = ("_errors", "_failed", "_first_error", "_producer", "_timeout")

    def __init__(self, settings: KafkaSettings, **overrides: Any) -> None:
        self._failed = 0
        self._first_error: str | None = None
        config: dict[str, Any] = {
            "delivery.report.only.error": True,
            "on_delivery": self._on_delivery,
        }
        config.update(overrides)
        self._producer, self._errors = make_producer(settings, **config)
        self._timeout = settings.delivery_timeout_ms / 1000.0 + 5.0

    @property
    def producer(self) -> Producer:
        return self._producer

    @property
    def client_errors(self) -> ClientErrors:
        return self._errors

    def _on_delivery(self, error: KafkaError | None, message: Message) -> None:
        if error is None:
            return
        self._failed += 1
        if self._first_error is None:
            self._first_error = f"{message.topic()}[{message.partition()}]: {error.name()}: {error.str()}"

    def produce(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        headers: OutHeaders | None = None,
        partition: int = -1,
    ) -> None:
        try:
            self._producer.produce(topic, value, key, partition, headers=headers)
        except BufferError:
            self._produce_when_room(topic, value, key, headers, partition)

    def _produce_when_room(
        self, topic: str, value: bytes | None, key: bytes | None, headers: OutHeaders | None, partition: int
    ) -> None:
        # The local queue is full (a flat_map fanned out a lot, say): serve deliveries until it drains.
        while True:
            self._producer.poll(0.05)
            self._errors.raise_fatal()
            try:
                self._producer.produce(topic, value, key, partition, headers=headers)
                return
            except BufferError:
                continue

    def flush(self) -> None:
        """Wait until every record produced so far is acknowledged; raise DeliveryError otherwise."""
        remaining = self._producer.flush(self._timeout)
        self._errors.raise_fatal()
        if self._failed:
            failed, first = self._failed, self._first_error
            self._failed, self._first_error = 0, None
            raise DeliveryError(f"{failed} record(s) were not delivered; first failure: {first}")
        if remaining:
            raise DeliveryError(
                f"{remaining} record(s) still unacknowledged after {self._timeout:.0f}s; "
                "is the cluster reachable and are the topics writable?"
            )

    def close(self) -> None:
        self._producer.flush(self._timeout)
