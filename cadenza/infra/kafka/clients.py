"""Factories for confluent-kafka clients with defaults fit for at-least-once stream processing.

Every client starts from :meth:`KafkaSettings.client_config` (bootstrap and security), then adds
role-specific defaults, then caller overrides. The defaults, and why:

- producer: idempotent (no duplicates or reordering from internal retries), ``acks=all``, a bounded
  delivery timeout so an unreachable cluster becomes an error instead of an endless retry;
- consumer: manual commits (cadenza commits only what is durable), ``earliest`` reset (a new group
  must not skip records), the short session timeout from the settings;
- all: librdkafka's log lines go to Python logging, and global errors are recorded so the caller can
  raise them (:class:`ClientErrors`).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, NoReturn, Protocol

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import AdminClient, ClusterMetadata

from cadenza.infra.kafka.errors import (
    BrokerUnavailableError,
    DeliveryError,
    KafkaClientError,
    from_kafka_error,
    from_kafka_exception,
)
from cadenza.infra.kafka.logs import RepeatFilter
from cadenza.settings import KafkaSettings

_log = logging.getLogger("cadenza.kafka")
_librdkafka_log = logging.getLogger("cadenza.kafka.librdkafka")
_librdkafka_log.addFilter(RepeatFilter())


class ClientErrors:
    """Collects librdkafka's global errors (``error_cb``) so they surface as exceptions.

    librdkafka reports "all brokers down" or a fatal idempotence error through a callback, not by
    raising; without this a client would keep retrying silently. Callbacks run on the thread that
    polls the client, so a lock is enough.

    Logging is rate-limited per error name: librdkafka reports every failed reconnect (about 390
    lines in a 10 s outage for one worker), which would bury everything else. The first one is
    logged, then at most one line per ``log_interval`` seconds with how many were left out; fatal
    errors are always logged. ``counts`` stays exact for the metrics.

    It also tells whether the client can reach a broker (``brokers_up``), for metrics and readiness.
    librdkafka says when every broker went down but not when one came back, so with
    ``statistics.interval.ms`` set, its periodic statistics (``stats_cb``) settle that: up as soon as
    any broker connection is in state ``UP``.
    """

    def __init__(
        self, role: str, *, log_interval: float = 10.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.role = role
        self.log_interval = log_interval
        self._clock = clock
        #: Per error name: when it was last logged, and how many were left out since.
        self._logged: dict[str, tuple[float, int]] = {}
        self._lock = threading.Lock()
        self._fatal: KafkaError | None = None
        self.last: KafkaError | None = None
        #: Errors reported so far, by librdkafka's error name (``_TRANSPORT``, ``_ALL_BROKERS_DOWN``...).
        self.counts: dict[str, int] = {}
        self.brokers_up = True
        #: Consumer lag per (topic, partition) from the last statistics report (consumers only).
        self.consumer_lag: dict[tuple[str, int], int] = {}
        #: Requests sent to the brokers by type (``Produce``, ``Fetch``, ``Heartbeat``...), as of the
        #: last statistics report: what the client costs the broker, which counts requests, not records.
        self.requests: dict[str, int] = {}

    def __call__(self, error: KafkaError) -> None:
        name = error.name()
        fatal = error.fatal()
        now = self._clock()
        with self._lock:
            self.last = error
            self.counts[name] = self.counts.get(name, 0) + 1
            if fatal:
                self._fatal = error
            if error.code() == KafkaError._ALL_BROKERS_DOWN:
                self.brokers_up = False
            last, left_out = self._logged.get(name, (None, 0))
            if not fatal and last is not None and now - last < self.log_interval:
                self._logged[name] = (last, left_out + 1)
                return
            self._logged[name] = (now, 0)
        if left_out:
            _log.log(
                logging.ERROR if fatal else logging.WARNING,
                "kafka %s: %s: %s (%d more like it in the last %.0f s not logged)",
                self.role,
                name,
                error.str(),
                left_out,
                0.0 if last is None else now - last,
            )
        else:
            _log.log(
                logging.ERROR if fatal else logging.WARNING, "kafka %s: %s: %s", self.role, name, error.str()
            )

    def statistics(self, raw: str) -> None:
        """librdkafka's statistics JSON: a broker connection in state ``UP`` means reachable again
        (for a consumer); the requests sent by type; a consumer's lag."""
        try:
            report = json.loads(raw)
            brokers = report.get("brokers", {})
            up = any(broker.get("state") == "UP" for broker in brokers.values())
            self.consumer_lag = _consumer_lag(report.get("topics", {}))
            self.requests = _requests(brokers, self.requests)
        except (ValueError, AttributeError, TypeError):  # a malformed report must not break the poll loop
            return
        if self.role == "producer":
            # A producer connects only when it has something to send, so an idle one has no
            # connection up and that says nothing about the broker: reachability is the consumers'.
            return
        if up != self.brokers_up:
            _log.log(
                logging.INFO if up else logging.WARNING,
                "kafka %s: %s",
                self.role,
                "a broker is reachable again" if up else "no broker connection is up",
            )
        self.brokers_up = up

    def raise_fatal(self) -> None:
        """Raise if librdkafka reported a fatal (unrecoverable) error for this client."""
        with self._lock:
            fatal = self._fatal
        if fatal is not None:
            raise from_kafka_error(fatal, f"kafka {self.role} failed fatally")


def _consumer_lag(topics: dict[str, Any]) -> dict[tuple[str, int], int]:
    """librdkafka reports -1 for a partition whose lag it does not know yet (and lists the internal
    partition -1): those are left out rather than shown as a lag of -1."""
    lag: dict[tuple[str, int], int] = {}
    for topic, entry in topics.items():
        for partition, stats in entry.get("partitions", {}).items():
            value = stats.get("consumer_lag", -1)
            if int(partition) >= 0 and isinstance(value, int) and value >= 0:
                lag[(topic, int(partition))] = value
    return lag


def _requests(brokers: dict[str, Any], before: dict[str, int]) -> dict[str, int]:
    """Requests by type summed over the brokers; never below ``before`` (a broker connection that
    librdkafka drops takes its counts along, and a counter must not go down)."""
    totals: dict[str, int] = {}
    for broker in brokers.values():
        for kind, count in broker.get("req", {}).items():
            if isinstance(count, int) and count > 0:
                totals[kind] = totals.get(kind, 0) + count
    return {kind: max(count, before.get(kind, 0)) for kind, count in {**before, **totals}.items()}


class DeliveryReport:
    """Counts acknowledged and failed deliveries; remembers the first failure for the error message."""

    def __init__(self) -> None:
        self.delivered = 0
        self.failed = 0
        self.first_error: KafkaError | None = None

    def __call__(self, error: KafkaError | None, message: Message) -> None:
        if error is None:
            self.delivered += 1
            return
        self.failed += 1
        if self.first_error is None:
            self.first_error = error

    def raise_if_failed(self) -> None:
        if self.first_error is not None:
            raise DeliveryError(
                f"{self.failed} record(s) were not delivered; first error: "
                f"{self.first_error.name()}: {self.first_error.str()}",
                code=self.first_error.name(),
            )


def _common(settings: KafkaSettings, role: str) -> tuple[dict[str, Any], ClientErrors]:
    errors = ClientErrors(role)
    config: dict[str, Any] = dict(settings.client_config())
    config["error_cb"] = errors
    config["stats_cb"] = errors.statistics  # called only if statistics.interval.ms is set
    config["logger"] = _librdkafka_log
    return config, errors


def producer_config(settings: KafkaSettings, **overrides: Any) -> tuple[dict[str, Any], ClientErrors]:
    """The producer's librdkafka config (exposed so benchmarks and tests can inspect the defaults)."""
    config, errors = _common(settings, "producer")
    config.update(
        {
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": settings.linger_ms,
            "delivery.timeout.ms": settings.delivery_timeout_ms,
            "request.timeout.ms": min(settings.request_timeout_ms, settings.delivery_timeout_ms),
        }
    )
    config.update(overrides)
    return config, errors


def make_producer(settings: KafkaSettings, **overrides: Any) -> tuple[Producer, ClientErrors]:
    """An idempotent producer and the recorder of its global errors."""
    config, errors = producer_config(settings, **overrides)
    return Producer(config), errors


#: The consumers' assignor: incremental rebalances, so a member joining or leaving stops only the
#: partitions that move (a join needs ``range``, see the worker).
DEFAULT_ASSIGNOR = "cooperative-sticky"


def make_consumer(settings: KafkaSettings, group_id: str, **overrides: Any) -> tuple[Consumer, ClientErrors]:
    """A consumer in ``group_id`` with manual commits and the settings' session timeout."""
    config, errors = _common(settings, "consumer")
    config.update(
        {
            "group.id": group_id,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": settings.session_timeout_ms,
            "heartbeat.interval.ms": max(500, settings.session_timeout_ms // 6),
            # The classic protocol: KIP-848's "consumer" protocol is not supported by every broker
            # cadenza runs against (Tansu), and the classic one works everywhere.
            "group.protocol": "classic",
            "partition.assignment.strategy": DEFAULT_ASSIGNOR,
        }
    )
    config.update(overrides)
    return Consumer(config), errors


def make_admin(settings: KafkaSettings, **overrides: Any) -> AdminClient:
    config, _errors = _common(settings, "admin")
    config.update(overrides)
    return AdminClient(config)


class Flushable(Protocol):
    """What :func:`flush_raising_fatal` needs of a producer (the worker's output wraps its own)."""

    def flush(self, *args: Any, **kwargs: Any) -> int: ...


def flush_raising_fatal(
    producer: Flushable, timeout: float, what: str, raise_fatal: Callable[[], None] | None = None
) -> int:
    """``producer.flush(timeout)``, with a fatal producer error raised as a cadenza error.

    A fatal error (say, the idempotence state lost because the broker came back without its data, or
    with its data but not its producers' sequence numbers) can surface from the delivery callbacks as
    an obscure ``SystemError`` caused by the ``KafkaException``. Raised as a
    :class:`KafkaClientError`, the worker's supervisor restarts the worker with a new producer;
    raised raw, it ended the worker for good. ``raise_fatal`` raises the fatal error the client's
    error callback recorded, if any, before that.
    """
    try:
        return int(producer.flush(timeout))
    except (KafkaException, SystemError) as exc:
        raise_as_client_error(exc, what, raise_fatal)


def raise_as_client_error(
    exc: KafkaException | SystemError, what: str, raise_fatal: Callable[[], None] | None = None
) -> NoReturn:
    """Raise what a producer call (``flush``, ``poll``) raised as a :class:`KafkaClientError`: the
    fatal error the client's error callback recorded (``raise_fatal``) if any, else the
    ``KafkaException`` itself or the one behind a ``SystemError`` from a delivery callback; anything
    else as it came. Only the exception path pays for it."""
    if raise_fatal is not None:
        raise_fatal()
    error = as_client_error(exc, what)
    if error is None:
        raise exc
    raise error from exc


def as_client_error(exc: BaseException, what: str) -> KafkaClientError | None:
    """The :class:`KafkaClientError` for a raw ``KafkaException`` (or a ``SystemError`` that one
    caused in a client callback), else None."""
    cause = exc if isinstance(exc, KafkaException) else exc.__cause__ or exc.__context__
    return from_kafka_exception(cause, what) if isinstance(cause, KafkaException) else None


def flush_or_raise(
    producer: Producer, report: DeliveryReport | None, timeout: float, errors: ClientErrors | None = None
) -> None:
    """Flush and raise if any record failed or is still unacknowledged after ``timeout`` seconds; a
    fatal producer error (recorded in ``errors``, or raised by the flush) as a cadenza error."""
    remaining = flush_raising_fatal(
        producer, timeout, "flushing a producer", None if errors is None else errors.raise_fatal
    )
    if report is not None:
        report.raise_if_failed()
    if remaining:
        raise DeliveryError(
            f"{remaining} record(s) still unacknowledged after {timeout:.1f}s; "
            "is the cluster reachable and the topic writable?"
        )


def raise_for_message_error(message: Message) -> bool:
    """True if ``message`` is a record; False for a partition-EOF event; raises for real errors."""
    error = message.error()
    if error is None:
        return True
    if error.code() == KafkaError._PARTITION_EOF:
        return False
    raise from_kafka_error(error, f"consuming {message.topic()}[{message.partition()}]")


def wait_for_broker(settings: KafkaSettings, timeout: float = 30.0) -> ClusterMetadata:
    """Block until a broker answers a metadata request; raise BrokerUnavailableError at ``timeout``."""
    admin = make_admin(settings)
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        try:
            metadata: ClusterMetadata = admin.list_topics(timeout=min(remaining, 2.0))
            if metadata.brokers:
                return metadata
        except Exception as exc:  # any failure to answer is "not ready yet" until the deadline
            last_error = exc
        time.sleep(0.1)
    detail = f" (last error: {last_error})" if last_error else ""
    raise BrokerUnavailableError(
        f"no Kafka broker answered at {settings.bootstrap_servers} within {timeout:.0f}s{detail}. "
        "Start one with `cadenza broker`, or set CADENZA_BOOTSTRAP_SERVERS to a reachable cluster."
    )


__all__ = [
    "DEFAULT_ASSIGNOR",
    "ClientErrors",
    "DeliveryReport",
    "KafkaClientError",
    "flush_or_raise",
    "make_admin",
    "make_consumer",
    "make_producer",
    "producer_config",
    "raise_for_message_error",
    "wait_for_broker",
]
