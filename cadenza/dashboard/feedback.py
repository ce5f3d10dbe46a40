"""The feedback topic's summaries for the page: the critical path, the pool's scaling decisions and
the workers' true rates.

The feedback topic carries the stats job's Avro statistics (which the dashboard does not show) and,
from ``cadenza analyze``, ``cadenza pool`` and the workers, JSON summaries marked by their
``cadenza-kind`` header (the same header the workers' feedback reader skips them by). The newest of
each kind is shown as it is (for true rates: the newest window of whichever worker published last).
Anything else (Avro, an unknown kind, a body that is not a JSON object) is skipped and counted, never
an error: the topic is shared.
"""

from __future__ import annotations

import json
from typing import Any

from confluent_kafka import Message

from cadenza.dashboard.follower import TopicFollower
from cadenza.feedback.records import (
    CRITICAL_PARTICIPATION_KIND,
    KIND_HEADER,
    POOL_DECISION_KIND,
    TRUE_RATES_KIND,
)
from cadenza.infra.kafka.headers import get_header
from cadenza.settings import KafkaSettings

__all__ = ["FeedbackReader", "classify"]


_SECTIONS = {
    CRITICAL_PARTICIPATION_KIND: "critical_path",
    POOL_DECISION_KIND: "pool",
    TRUE_RATES_KIND: "true_rates",
}


def classify(kind: bytes | None, value: bytes | None) -> tuple[str, dict[str, Any]] | None:
    """``("critical_path" | "pool" | "true_rates", summary)`` for a summary the page shows, else ``None``."""
    section = _SECTIONS.get(kind) if kind is not None else None
    if section is None or not value:
        return None
    try:
        document = json.loads(value)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(document, dict):
        return None
    return section, document


class FeedbackReader(TopicFollower):
    """Follows the feedback topic in a thread of its own (its own consumer group, from the start)."""

    def __init__(self, settings: KafkaSettings, topic: str) -> None:
        super().__init__(settings, topic, "feedback")
        self.skipped = 0
        self._latest: dict[str, dict[str, Any]] = {}
        self.start()

    def handle(self, message: Message) -> None:
        found = classify(get_header(message.headers(), KIND_HEADER), message.value())
        with self._lock:
            if found is None:
                self.skipped += 1
            else:
                self._latest[found[0]] = found[1]

    def extras(self) -> dict[str, Any]:
        """What the page's critical-path, pool and true-rates sections show (``None``: not available yet)."""
        with self._lock:
            return {section: self._latest.get(section) for section in _SECTIONS.values()}
