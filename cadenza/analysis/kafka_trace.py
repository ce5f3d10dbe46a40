"""The activities topic: where each worker's :class:`ActivityRecorder` sends its batches.

One producer per worker, keyed by worker id so that a worker's batches stay in order in one
partition. A batch the producer cannot queue (its buffer full) is dropped and counted: a trace is a
diagnosis aid and must never block the worker's loop.

Message edges: while tracing, every record a worker produces carries a ``cadenza-trace`` header with
the producing worker's id; the send time is the record's Kafka timestamp (CreateTime, set by the
producer client, millisecond precision). The fetching worker records, per fetch and per
``(topic, partition)`` among the fetch's last records, one message from the last record's sender at
its send time to itself at the end of the fetch: per interval, not per record, and the last record is
the one the fetched work waited for longest. A record without the header (written by something
else, or by an Avro-format sink, whose codec supplies the headers) makes no edge.
"""

from __future__ import annotations

import logging
import time

from confluent_kafka import TIMESTAMP_CREATE_TIME, KafkaException, Message

from cadenza.analysis.recorder import ActivityRecorder
from cadenza.infra.kafka.clients import make_producer
from cadenza.infra.kafka.headers import get_header
from cadenza.infra.kafka.topics import TopicSpec
from cadenza.settings import KafkaSettings

__all__ = ["ACTIVITIES_TOPIC", "TRACE_HEADER", "KafkaActivityTrace", "activities_topic_spec"]

_log = logging.getLogger("cadenza.analysis")

#: The default name of the activities topic.
ACTIVITIES_TOPIC = "cadenza-activities"

#: How many records, from the end of a fetch, are looked at for message edges: a fetch holds runs
#: of records per partition, so its last records cover its last partitions, at a cost per fetch
#: rather than per record (a partition only earlier in the fetch gets its edge from a later one).
_SCAN = 64

#: The header naming the worker that produced a record (value: its worker id, UTF-8).
TRACE_HEADER = "cadenza-trace"


def activities_topic_spec(topic: str, partitions: int = 1) -> TopicSpec:
    """A few days of traces are plenty for a diagnosis; older batches are deleted."""
    return TopicSpec(topic, partitions, configs={"retention.ms": str(3 * 24 * 3600 * 1000)})


class KafkaActivityTrace:
    """A recorder whose batches go to ``topic``; :meth:`close` sends what is left."""

    def __init__(self, settings: KafkaSettings, topic: str, worker_id: str, *, linger: float = 1.0) -> None:
        self.topic = topic
        self.dropped_batches = 0
        self._key = worker_id.encode()
        self._producer, self.client_errors = make_producer(settings, **{"linger.ms": 50})
        self._flush_timeout = settings.request_timeout_ms / 1000.0
        self.recorder = ActivityRecorder(worker_id, self._send, linger=linger)
        self.header: tuple[str, bytes] = (TRACE_HEADER, self._key)

    def fetch(self, messages: list[Message], *, queued: bool, started: float, returned: float) -> None:
        """One poll of the worker's loop, from ``started`` until it ``returned`` with ``messages``.

        With nothing ``queued`` the poll blocked: waiting until it returned (the records' arrival ends
        the wait), then decoding them until now. With records queued the poll does not block.
        """
        record = self.recorder.record
        now = time.time()
        if queued:
            record("deserialization", started, now, None)
        else:
            record("waiting", started, returned, None)
            if messages:
                record("deserialization", returned, now, None)
        if messages:
            self.fetched(messages, returned)

    def fetched(self, messages: list[Message], received: float) -> None:
        """Record the message edges of one fetch (see the module docstring)."""
        seen: set[tuple[str | None, int | None]] = set()
        for message in messages[: -_SCAN - 1 : -1]:
            where = (message.topic(), message.partition())
            if where in seen:
                continue
            seen.add(where)
            if message.error() is not None:
                continue
            kind, millis = message.timestamp()
            sender = get_header(message.headers(), TRACE_HEADER)
            if sender is None or kind != TIMESTAMP_CREATE_TIME or not sender:
                continue
            try:
                name = sender.decode()
            except UnicodeDecodeError:
                continue
            self.recorder.message(name, millis / 1000.0, received, where[0])

    def _send(self, batch: bytes) -> None:
        try:
            self._producer.produce(self.topic, batch, self._key)
        except (BufferError, KafkaException) as exc:
            self.dropped_batches += 1
            _log.warning("activity batch dropped: %s", exc)
        self._producer.poll(0)

    def close(self, timeout: float | None = None) -> None:
        """Send what is recorded, waiting up to ``timeout`` seconds (default: the request timeout)."""
        self.recorder.flush()
        left = self._producer.flush(self._flush_timeout if timeout is None else timeout)
        if left:
            _log.warning("%d activity batches not delivered at close", left)
