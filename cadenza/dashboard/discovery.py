"""Following the discovery topic: which workers exist now, and how fresh their heartbeats are.

Workers announce their metrics URL on a compacted topic (:mod:`cadenza.worker.announcer`).
The dashboard reads it from the beginning with a consumer group of its own, so a restarted dashboard
finds every worker again from the topic alone. :class:`DiscoveredWorkers` is the pure part (what a
sequence of records means); :class:`DiscoveryReader` feeds it from Kafka on a thread. Records that
are not announcements are skipped and counted, never an error: a shared topic may carry anything.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Message

from cadenza.dashboard.follower import TopicFollower
from cadenza.settings import KafkaSettings
from cadenza.worker.announcer import Announcement, AnnouncementError, parse_announcement

__all__ = ["DiscoveredWorker", "DiscoveredWorkers", "DiscoveryReader"]

_log = logging.getLogger("cadenza.dashboard.discovery")


@dataclass(frozen=True)
class DiscoveredWorker:
    """One announced worker as the dashboard shows it; ``heartbeat_age_s`` is measured at ``now``."""

    announcement: Announcement
    heartbeat_age_s: float
    stale: bool


class DiscoveredWorkers:
    """The newest announcement per worker id; a tombstone removes the worker.

    Two worker ids announcing the same URL (a worker restarted on the same port before its old
    tombstone was written, say) are one endpoint: :meth:`at` keeps the fresher announcement.
    """

    def __init__(self) -> None:
        self._by_id: dict[str, Announcement] = {}
        self.skipped = 0
        self.last_error: str | None = None

    def __len__(self) -> int:
        """Workers announced and not yet gone (by worker id)."""
        return len(self._by_id)

    def apply(self, key: bytes | None, value: bytes | None) -> bool:
        """Take one record of the topic into account; ``False`` when it was skipped (and counted)."""
        try:
            announcement = parse_announcement(key, value)
        except AnnouncementError as exc:
            self.skipped += 1
            self.last_error = str(exc)
            return False
        if announcement is None:
            assert key is not None  # parse_announcement rejects a record without a key
            self._by_id.pop(key.decode(errors="replace"), None)
        else:
            self._by_id[announcement.worker_id] = announcement
        return True

    def at(self, now: float, stale_after_s: float) -> dict[str, DiscoveredWorker]:
        """Every announced worker by URL; ``stale`` when its last heartbeat is older than the bound."""
        found: dict[str, DiscoveredWorker] = {}
        for announcement in sorted(self._by_id.values(), key=lambda a: a.heartbeat_at):
            age = max(0.0, now - announcement.heartbeat_at)
            found[announcement.url] = DiscoveredWorker(announcement, age, age > stale_after_s)
        return found


class DiscoveryReader(TopicFollower):
    """Follows the discovery topic in a thread of its own (its own consumer group, from the start).

    ``heartbeat_stale_s``: a worker whose last announcement is older than this is shown as stale
    (it was killed without its tombstone, or cannot reach the broker); pick it above the workers'
    announcement interval.
    """

    def __init__(self, settings: KafkaSettings, topic: str, *, heartbeat_stale_s: float = 15.0) -> None:
        if heartbeat_stale_s <= 0:
            raise ValueError(f"heartbeat_stale_s must be positive, got {heartbeat_stale_s!r}")
        super().__init__(settings, topic, "discovery")
        self.heartbeat_stale_s = heartbeat_stale_s
        self._state = DiscoveredWorkers()
        self.start()

    @property
    def skipped(self) -> int:
        with self._lock:
            return self._state.skipped

    def handle(self, message: Message) -> None:
        with self._lock:
            applied = self._state.apply(message.key(), message.value())
            skipped, reason = self._state.skipped, self._state.last_error
        if not applied:
            # Loud once (a misconfigured producer writes to the wrong topic), quiet after.
            level = logging.WARNING if skipped == 1 else logging.DEBUG
            _log.log(level, "skipped a record of %s (%d so far): %s", self.topic, skipped, reason)

    def status(self) -> dict[str, Any]:
        """What the page says about discovery: the topic, how many workers, how many records skipped."""
        with self._lock:
            return {
                "topic": self.topic,
                "workers": len(self._state),
                "skipped": self._state.skipped,
            }

    def workers(self, now: float) -> dict[str, DiscoveredWorker]:
        """The workers announced now, by URL (what :class:`~cadenza.dashboard.live.Dashboard` polls)."""
        with self._lock:
            return self._state.at(now, self.heartbeat_stale_s)
