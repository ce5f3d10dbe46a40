"""Where encoded spans go: the metrics topic, through a producer of its own.

The emitter decides what to send and when (sampling, batching, bounding); a sink only moves bytes.
Keeping the transport behind this small protocol lets the batching logic be tested without a broker
and lets tools write spans elsewhere (a file, a benchmark's null sink).

Spans get a producer separate from the worker's: the worker flushes its producer before every commit
and fails if a record is not acknowledged, and neither the wait for span deliveries nor a metrics
topic outage may ever hold up or fail the data path.
"""

from __future__ import annotations

from typing import Any, Protocol

from confluent_kafka import Producer

from cadenza.infra.kafka.clients import ClientErrors, DeliveryReport, make_producer
from cadenza.settings import KafkaSettings

__all__ = ["SPAN_PRODUCER_DEFAULTS", "KafkaSpanSink", "SpanSink"]

SPAN_PRODUCER_DEFAULTS: dict[str, Any] = {
    # Spans are samples: a rare duplicate or loss skews nothing, and idempotence would add a
    # round of producer-id bookkeeping and stricter in-flight limits for no benefit.
    "enable.idempotence": False,
    "acks": "1",
    # Larger batches: span records are small and many, and nobody waits for them.
    "linger.ms": 100,
}
"""librdkafka settings of the span producer, on top of cadenza's producer defaults."""


class SpanSink(Protocol):
    """The transport a :class:`~cadenza.infra.metrics.emitter.SpanEmitter` hands encoded spans to."""

    def send(self, key: bytes, value: bytes) -> bool:
        """Queue one record; False if the transport refused it (its own queue is full)."""
        ...

    def poll(self) -> None:
        """Serve delivery reports; called by the emitter after each batch."""
        ...

    def flush(self, timeout: float) -> int:
        """Wait up to ``timeout`` seconds for queued records; return how many are still pending."""
        ...

    def close(self, timeout: float) -> None:
        """Flush what can be flushed in ``timeout`` and release the transport."""
        ...

    @property
    def delivered(self) -> int:
        """Records the destination acknowledged."""
        ...

    @property
    def failed(self) -> int:
        """Records the destination did not acknowledge."""
        ...


class KafkaSpanSink:
    """Produces spans to ``topic``, keyed by trace id, with the span schema's fingerprint header."""

    __slots__ = ("_errors", "_headers", "_producer", "_report", "topic")

    def __init__(
        self,
        settings: KafkaSettings,
        topic: str,
        headers: list[tuple[str, bytes]] | None = None,
        **producer_overrides: Any,
    ) -> None:
        self.topic = topic
        self._headers: list[tuple[str, str | bytes | None]] = list(headers or [])
        config = {**SPAN_PRODUCER_DEFAULTS, **producer_overrides}
        self._producer: Producer
        self._errors: ClientErrors
        self._producer, self._errors = make_producer(settings, **config)
        self._report = DeliveryReport()

    def send(self, key: bytes, value: bytes) -> bool:
        try:
            self._producer.produce(
                self.topic, value=value, key=key, headers=self._headers, on_delivery=self._report
            )
        except BufferError:
            return False
        return True

    def poll(self) -> None:
        self._producer.poll(0)

    def flush(self, timeout: float) -> int:
        return int(self._producer.flush(max(0.0, timeout)))

    def close(self, timeout: float) -> None:
        self.flush(timeout)

    @property
    def delivered(self) -> int:
        return self._report.delivered

    @property
    def failed(self) -> int:
        return self._report.failed

    @property
    def errors(self) -> ClientErrors:
        """librdkafka's global errors for this producer (e.g. the metrics cluster is unreachable)."""
        return self._errors
