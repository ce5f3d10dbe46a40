"""A topic the dashboard follows in a thread of its own, from the start, in a consumer group of its own.

The dashboard's readers (discovery, feedback) differ only in what one record means to them; the
thread, the consumer's life and a clean stop are the same, so they live here once.
"""

from __future__ import annotations

import logging
import threading
import uuid

from confluent_kafka import Message

from cadenza.infra.kafka.clients import make_consumer
from cadenza.settings import KafkaSettings

__all__ = ["TopicFollower"]

_log = logging.getLogger("cadenza.dashboard")


class TopicFollower:
    """Subclasses implement :meth:`handle`; it runs on the follower's thread, under ``self._lock``'s
    protection only where the subclass takes it."""

    def __init__(self, settings: KafkaSettings, topic: str, name: str) -> None:
        self.topic = topic
        self._lock = threading.Lock()
        self._stop = threading.Event()
        # A fresh group each time: a dashboard always wants the whole topic, never a share of it.
        self._consumer, self._errors = make_consumer(
            settings, f"cadenza-dashboard-{name}-{uuid.uuid4().hex[:8]}"
        )
        self._consumer.subscribe([topic])
        self._thread = threading.Thread(target=self._run, name=f"dashboard-{name}", daemon=True)

    def start(self) -> None:
        """Begin following (separate from ``__init__`` so a subclass finishes its own set-up first)."""
        self._thread.start()

    def handle(self, message: Message) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                messages = self._consumer.consume(100, 0.5)
            except RuntimeError:  # closed under us
                return
            for message in messages:
                if message.error() is None:
                    self.handle(message)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        try:
            self._consumer.close()
        except RuntimeError:  # already closed
            _log.debug("%s consumer already closed", self.topic)
