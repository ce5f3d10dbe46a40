"""The activities topic: where each worker's :class:`ActivityRecorder` sends its batches.

One producer per worker, keyed by worker id so that a worker's batches stay in order in one
partition. A batch the producer cannot queue (its buffer full) is dropped and counted: a trace is a
diagnosis aid and must never block the worker's loop.
"""

from __future__ import annotations

import logging

from confluent_kafka import KafkaException

from cadenza.analysis.recorder import ActivityRecorder
from cadenza.infra.kafka.clients import make_producer
from cadenza.infra.kafka.topics import TopicSpec
from cadenza.settings import KafkaSettings

__all__ = ["ACTIVITIES_TOPIC", "KafkaActivityTrace", "activities_topic_spec"]

_log = logging.getLogger("cadenza.analysis")

#: The default name of the activities topic.
ACTIVITIES_TOPIC = "cadenza-activities"


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

    def _send(self, batch: bytes) -> None:
        try:
            self._producer.produce(self.topic, batch, self._key)
        except (BufferError, KafkaException) as exc:
            self.dropped_batches += 1
            _log.warning("activity batch dropped: %s", exc)
        self._producer.poll(0)

    def close(self) -> None:
        self.recorder.flush()
        left = self._producer.flush(self._flush_timeout)
        if left:
            _log.warning("%d activity batches not delivered at close", left)
