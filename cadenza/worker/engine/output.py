"""The produce stage: every record a worker writes (sinks, repartition, changelog, late, dead letter).

One idempotent producer per produce lane (:func:`cadenza.worker.kafka.lanes.plan_produce_lanes`: a bulk
lane's producer lingers longer, so that records interleaved with an urgent tenant's still leave in
few requests), one for everything when the worker has one lane; each topic is written by exactly one
of them, so a partition's records keep their order. Every record is produced with the delivery callback of the
open :class:`Epoch` (and nothing is produced through it without one). :meth:`Output.flush` proves
every record was acknowledged, because a flush returns only when each record was either
acknowledged or reported failed. A successful delivery of a record to a topic in ``ack_latency``
(sink and repartition topics) is also timed there: librdkafka's own latency of the record, produce
call to acknowledgement (``cadenza_produce_ack_seconds``). That costs one Python call per record on
the thread that serves the producer (about a microsecond against the record's 15 or so, see
``benchmarks/results/2026-11-28/NOTES.md``, "Delivery reports"); with failures reported only
(``delivery.report.only.error``, an earlier version) a success cost nothing, and nothing was known of
the produce stage's share of a result's latency.

A record larger than the producer's ``message.max.bytes`` is refused by ``produce()`` itself, before it
is queued. :meth:`Output.produce` turns that refusal into :class:`RecordTooLargeError`, so the step that
made the record can dead-letter the consumed record instead of the error stopping the worker (which,
the record being uncommitted, would stop every restart at the same record).

**Acknowledgements are counted per epoch, so that a checkpoint need not wait for them.** Every record
is produced with the current :class:`Epoch`'s delivery callback and counted in it; :meth:`Output.seal`
closes the epoch and opens the next. A checkpoint seals one when it takes its offsets and commits them
once that epoch and every earlier one are acknowledged (:mod:`cadenza.worker.kafka.checkpoint`), while the
worker goes on running. A flush at every checkpoint instead held the whole worker for the slowest
acknowledgement of the interval: on the embedded broker (Tansu), which acknowledges ``acks=all``
about 100 ms after a record arrives, that was a stall of 100 to 250 ms every 200 ms commit interval.

Backpressure is a signal, not a wait: :attr:`Output.pressure` says a producer's local queue is
above its high mark (half its capacity), and the worker obeys it before it fetches or starts a
quantum (see :mod:`cadenza.worker.kafka.fetcher`), so the queue normally never fills. Only a single
quantum producing more than the remaining half of the queue (a flat_map fanning out hugely) can
still find it full; :meth:`Output.produce` then serves deliveries until the record fits (counted in
:attr:`Output.full_waits`), since the record's step has already run and cannot be taken back.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Sequence
from typing import Any, Protocol

from confluent_kafka import KafkaError, KafkaException, Message

from cadenza.errors import CadenzaError
from cadenza.infra.kafka.clients import (
    ClientErrors,
    flush_raising_fatal,
    make_producer,
    raise_as_client_error,
)
from cadenza.infra.kafka.errors import DeliveryError
from cadenza.infra.metrics.prometheus import LatencyHistogram
from cadenza.settings import KafkaSettings
from cadenza.state.serde import FENCE_KEY

__all__ = ["Epoch", "OutHeaders", "Output", "ProducerLike", "RecordTooLargeError", "too_large"]

#: librdkafka's default ``queue.buffering.max.messages``.
_DEFAULT_QUEUE_MESSAGES = 100_000

#: Headers as the producer takes them.
OutHeaders = list[tuple[str, str | bytes | None]]


class ProducerLike(Protocol):
    """What the worker uses of a confluent-kafka ``Producer``; an in-memory producer
    (:mod:`cadenza.worker.engine.memory`) stands in for it where there is no broker."""

    def produce(self, *args: Any, **kwargs: Any) -> None: ...

    def poll(self, *args: Any, **kwargs: Any) -> int: ...

    def flush(self, *args: Any, **kwargs: Any) -> int: ...

    def __len__(self) -> int: ...


class RecordTooLargeError(CadenzaError):
    """A record the producer refused for its size; ``error_type`` is what a dead letter is tagged with."""

    error_type = "RecordTooLarge"


def too_large(exc: KafkaException, topic: str, value: bytes | None, key: bytes | None) -> RecordTooLargeError:
    """``exc`` as a :class:`RecordTooLargeError` if the producer refused the record for its size; else
    ``exc`` is re-raised (any other refusal of ``produce()`` is a real failure of the client)."""
    error = exc.args[0] if exc.args else None
    if not isinstance(error, KafkaError) or error.code() != KafkaError.MSG_SIZE_TOO_LARGE:
        raise exc
    return RecordTooLargeError(
        f"a record for {topic!r} of {len(value or b'')} value bytes and {len(key or b'')} key bytes is "
        "larger than the producer's message.max.bytes allows"
    )


class Epoch:
    """The records produced between two seals; :attr:`unacked` counts those not yet acknowledged.

    Its bound :meth:`delivered` is each of its records' delivery callback, so an acknowledgement is
    accounted to the epoch its record was produced in, whatever order the broker's partitions answer in.
    """

    __slots__ = ("_output", "unacked")

    def __init__(self, output: Output) -> None:
        self._output = output
        self.unacked = 0

    def delivered(self, error: KafkaError | None, message: Message) -> None:
        # Called once per record produced: the acknowledgement's latency is timed here, without a
        # second call into the output.
        self.unacked -= 1
        if error is None:
            histogram = self._output.ack_latency.get(message.topic() or "")
            if histogram is not None:
                latency = message.latency()
                if latency is not None:
                    histogram.observe(latency)
            return
        self._output.failed(error, message)


class ProducerLane(Protocol):
    """One producer's share of the topics (:class:`cadenza.worker.kafka.lanes.ProduceLane` is one):
    the first lane's producer is the output's own, later ones linger their own ``linger_ms``."""

    @property
    def index(self) -> int: ...

    @property
    def name(self) -> str: ...

    @property
    def linger_ms(self) -> int: ...

    @property
    def topics(self) -> Collection[str]: ...


class Output:
    """Produces asynchronously; :meth:`flush` raises if anything since the last flush was lost."""

    __slots__ = (
        "_by_topic",
        "_errors",
        "_failed",
        "_first_error",
        "_high",
        "_producer",
        "_producers",
        "_timeout",
        "ack_latency",
        "deliver",
        "epoch",
        "full_waits",
        "lane_errors",
        "trace_header",
    )

    def __init__(self, settings: KafkaSettings, **overrides: Any) -> None:
        config: dict[str, Any] = dict(overrides)
        producer, errors = make_producer(settings, **config)
        capacity = int(config.get("queue.buffering.max.messages", _DEFAULT_QUEUE_MESSAGES))
        self._setup(producer, errors, settings.delivery_timeout_ms / 1000.0 + 5.0, capacity)

    @classmethod
    def for_lanes(cls, settings: KafkaSettings, lanes: Sequence[ProducerLane], **overrides: Any) -> Output:
        """An output with the first produce lane's producer made as by the constructor and one more
        per later lane, lingering that lane's ``linger_ms``; each lane's topics go to its producer."""
        output = cls(settings, **overrides)
        for lane in lanes:
            if lane.index == 0:
                producer, errors = output._producer, output._errors
            else:
                producer, errors = make_producer(settings, **{**overrides, "linger.ms": lane.linger_ms})
                output._producers = (*output._producers, producer)
                output.lane_errors.append((lane.name, errors))
            output._by_topic.update(dict.fromkeys(lane.topics, producer))
        return output

    @classmethod
    def over(
        cls, producer: ProducerLike, errors: ClientErrors, capacity: int = _DEFAULT_QUEUE_MESSAGES
    ) -> Output:
        """An output writing through ``producer`` instead of a Kafka client made from settings (the
        broker-free test driver's in-memory producer); everything else behaves the same."""
        output = cls.__new__(cls)
        output._setup(producer, errors, 5.0, capacity)
        return output

    def _setup(self, producer: ProducerLike, errors: ClientErrors, timeout: float, capacity: int) -> None:
        #: With an activity trace on, ``(cadenza-trace, worker id)``: added to every record produced,
        #: so that the worker fetching it can record the message edge (see cadenza.analysis.kafka_trace).
        self.trace_header: tuple[str, bytes] | None = None
        #: Per topic, the histogram its records' produce-to-acknowledgement seconds go to (set by plan
        #: assembly for sink and repartition topics; other topics are not timed).
        self.ack_latency: dict[str, LatencyHistogram] = {}
        self._failed = 0
        self._first_error: str | None = None
        self._producer: ProducerLike = producer
        #: Every producer, the first lane's first.
        self._producers: tuple[ProducerLike, ...] = (producer,)
        #: The producer of each topic a produce lane lists; any other topic goes to the first.
        self._by_topic: dict[str, ProducerLike] = {}
        self._errors = errors
        #: Each producer's name (``producer``, ``producer-lane1``...) and error handler.
        self.lane_errors: list[tuple[str, ClientErrors]] = [("producer", errors)]
        self._timeout = timeout
        #: Records queued locally above which :attr:`pressure` is on.
        self._high = max(1, capacity // 2)
        #: Times a produce found the local queue full all the same and waited for room.
        self.full_waits = 0
        #: The open epoch, and its delivery callback (every produce passes it and counts the record in
        #: the epoch: see :class:`Epoch`).
        self.epoch = Epoch(self)
        self.deliver = self.epoch.delivered

    def seal(self) -> Epoch:
        """Close the open epoch (returned: its records are counted until acknowledged) and open the
        next; cheap, nothing waits."""
        sealed = self.epoch
        self.epoch = epoch = Epoch(self)
        self.deliver = epoch.delivered
        return sealed

    def raise_failed(self) -> None:
        """Raise DeliveryError if a record was reported not delivered (served callbacks only)."""
        if self._failed:
            failed, first = self._failed, self._first_error
            self._failed, self._first_error = 0, None
            raise DeliveryError(f"{failed} record(s) were not delivered; first failure: {first}")

    @property
    def pressure(self) -> bool:
        """A producer's local queue is above its high mark: fetch and start nothing more until the
        broker's acknowledgements bring it down (one cheap length read per producer)."""
        high = self._high
        return any(len(producer) >= high for producer in self._producers)

    @property
    def producer(self) -> ProducerLike:
        """The first lane's producer (the worker's own records, and every topic no lane lists)."""
        return self._producer

    def producer_for(self, topic: str) -> ProducerLike:
        """The producer that writes ``topic`` (a sink binds its ``produce`` once)."""
        return self._by_topic.get(topic, self._producer)

    @property
    def client_errors(self) -> ClientErrors:
        return self._errors

    def failed(self, error: KafkaError, message: Message) -> None:
        """Count a record reported not delivered; :meth:`raise_failed` and :meth:`flush` raise for it."""
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
        """Queue a record; raises :class:`RecordTooLargeError` if it is over the producer's size limit."""
        trace = self.trace_header
        if trace is not None:
            headers = [trace] if headers is None else [*headers, trace]
        # One dict lookup (about 35 ns) picks the topic's lane producer.
        producer = self._by_topic.get(topic, self._producer)
        try:
            producer.produce(topic, value, key, partition, headers=headers, on_delivery=self.deliver)
            self.epoch.unacked += 1
        except BufferError:
            self._produce_when_room(producer, topic, value, key, headers=headers, partition=partition)
        except KafkaException as exc:
            raise too_large(exc, topic, value, key) from None

    def _produce_when_room(
        self,
        producer: ProducerLike,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        *,
        headers: OutHeaders | None,
        partition: int,
    ) -> None:
        # The local queue is full although the worker obeys :attr:`pressure` (one quantum fanned out
        # more than half the queue): the step has run, so serve deliveries until the record fits.
        self.full_waits += 1
        while True:
            try:
                producer.poll(0.05)
            except (KafkaException, SystemError) as exc:
                raise_as_client_error(exc, "serving the worker's deliveries", self._raise_fatal)
            self._raise_fatal()
            try:
                producer.produce(topic, value, key, partition, headers=headers, on_delivery=self.deliver)
                self.epoch.unacked += 1
                return
            except BufferError:
                continue
            except KafkaException as exc:
                raise too_large(exc, topic, value, key) from None

    def fence(self, changelogs: list[tuple[str, int]], epoch: int) -> None:
        """Write a hand-over fence at ``epoch`` into each changelog partition and wait until durable:
        a plan move's new owner has the whole state once it read them (:mod:`cadenza.scaling.ownership`)."""
        for topic, partition in changelogs:
            self.produce(topic, str(epoch).encode(), FENCE_KEY, partition=partition)
        self.flush()

    def serve(self) -> None:
        """Serve delivery reports without waiting: failures are counted (and raised by the next
        :meth:`flush`) only once served, and a fatal error is raised at once."""
        try:
            for producer in self._producers:
                producer.poll(0)
        except (KafkaException, SystemError) as exc:
            # A fatal error surfaces here too (through a delivery callback): raised raw, the
            # supervisor, which restarts on cadenza's Kafka errors only, ended the worker for good.
            raise_as_client_error(exc, "serving the worker's deliveries", self._raise_fatal)
        self._raise_fatal()

    def _raise_fatal(self) -> None:
        for _, errors in self.lane_errors:
            errors.raise_fatal()

    def flush(self) -> None:
        """Wait until every record produced so far is acknowledged; raise DeliveryError otherwise.

        Flushes in steps of at most a second, so that a fatal producer error (say, the idempotence
        state lost because the broker came back without its data) stops the worker at once instead of
        after the whole delivery timeout, during which the worker would neither run nor fetch.
        """
        deadline = time.monotonic() + self._timeout
        while True:
            remaining = 0
            for producer in self._producers:
                step = min(1.0, max(0.0, deadline - time.monotonic()))
                what = "flushing the worker's output"
                remaining += flush_raising_fatal(producer, step, what, self._raise_fatal)
            self._raise_fatal()
            if not remaining or time.monotonic() >= deadline:
                break
        self.raise_failed()
        if remaining:
            raise DeliveryError(
                f"{remaining} record(s) still unacknowledged after {self._timeout:.0f}s; "
                "is the cluster reachable and are the topics writable?"
            )

    def close(self) -> None:
        deadline = time.monotonic() + self._timeout
        for producer in self._producers:
            producer.flush(max(0.0, deadline - time.monotonic()))
