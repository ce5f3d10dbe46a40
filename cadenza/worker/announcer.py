"""Worker discovery: each worker with a metrics port announces where it can be scraped.

The dashboard (and anything else that wants every worker's ``/metrics``) should not need a list of
URLs kept by hand while a pool scales. A worker writes a small JSON announcement to a compacted
topic, keyed by its worker id: compaction keeps the newest announcement per worker, so a reader
starting from the beginning reads about one record per live worker. The announcement is repeated
every ``interval_s`` (its ``heartbeat_at`` tells a reader how fresh it is, so a worker killed without
a goodbye ages into "stale"), and a clean stop writes a tombstone (a null value), which removes the
worker from readers and, after compaction, from the topic.

The announcer runs on a thread and a producer of its own, never on the worker's executor: a broker
that refuses it is logged and counted in :attr:`WorkerAnnouncer.failures`, and cannot stop or slow
the worker.
"""

from __future__ import annotations

import json
import logging
import math
import socket
import threading
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from confluent_kafka import KafkaException

from cadenza.infra.kafka.clients import make_admin, make_producer
from cadenza.infra.kafka.topics import TopicSpec, ensure_topics
from cadenza.scheduling.clock import Clock, SystemClock
from cadenza.settings import KafkaSettings

__all__ = [
    "DEFAULT_DISCOVERY_TOPIC",
    "Announcement",
    "AnnouncementError",
    "WorkerAnnouncer",
    "advertised_url",
    "discovery_topic_spec",
    "parse_announcement",
]

_log = logging.getLogger("cadenza.metrics.discovery")

DEFAULT_DISCOVERY_TOPIC = "cadenza-workers"

#: Announcements larger than this are not announcements (the topic is shared; a reader must not
#: hold arbitrary blobs).
MAX_ANNOUNCEMENT_BYTES = 64 * 1024


class AnnouncementError(ValueError):
    """A record of the discovery topic that is not a worker announcement."""


@dataclass(frozen=True)
class Announcement:
    """Where one worker's metrics are, and when it last said so (epoch seconds)."""

    worker_id: str
    url: str
    group: str
    pipelines: tuple[str, ...]
    started_at: float
    heartbeat_at: float

    def to_json(self) -> bytes:
        document: dict[str, Any] = asdict(self)
        document["pipelines"] = list(self.pipelines)
        return json.dumps(document, sort_keys=True).encode()


def discovery_topic_spec(topic: str = DEFAULT_DISCOVERY_TOPIC, replication_factor: int = 1) -> TopicSpec:
    """The discovery topic: one partition (a handful of records), compacted (newest per worker)."""
    return TopicSpec(
        topic, partitions=1, replication_factor=replication_factor, configs={"cleanup.policy": "compact"}
    )


def _text(document: dict[str, Any], name: str) -> str:
    value = document.get(name)
    if not isinstance(value, str) or not value:
        raise AnnouncementError(f"field {name!r} must be a non-empty string, got {value!r}")
    return value


def _time(document: dict[str, Any], name: str) -> float:
    value = document.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise AnnouncementError(f"field {name!r} must be epoch seconds, got {value!r}")
    return float(value)


def parse_announcement(key: bytes | None, value: bytes | None) -> Announcement | None:
    """The announcement of a record; ``None`` for a tombstone (the worker of ``key`` stopped).

    Raises :class:`AnnouncementError` for anything else: no key, a key that is not the document's
    worker id, a body that is not a JSON object with the expected fields, or one too large.
    """
    if not key:
        raise AnnouncementError("a discovery record needs the worker id as its key")
    if value is None:
        return None
    if len(value) > MAX_ANNOUNCEMENT_BYTES:
        raise AnnouncementError(f"announcement of {len(value)} bytes is larger than {MAX_ANNOUNCEMENT_BYTES}")
    try:
        document = json.loads(value)
    except (ValueError, UnicodeDecodeError) as exc:
        raise AnnouncementError(f"not JSON: {exc}") from exc
    if not isinstance(document, dict):
        raise AnnouncementError(f"not a JSON object: {type(document).__name__}")
    worker_id = _text(document, "worker_id")
    try:
        key_text = key.decode()
    except UnicodeDecodeError as exc:
        raise AnnouncementError("the key is not UTF-8") from exc
    if key_text != worker_id:
        raise AnnouncementError(f"key {key_text!r} is not the announced worker id {worker_id!r}")
    url = _text(document, "url")
    if not url.startswith(("http://", "https://")):
        raise AnnouncementError(f"url {url!r} is not an http(s) URL")
    pipelines = document.get("pipelines", [])
    if not isinstance(pipelines, list) or not all(isinstance(p, str) for p in pipelines):
        raise AnnouncementError(f"pipelines must be a list of names, got {pipelines!r}")
    return Announcement(
        worker_id=worker_id,
        url=url,
        group=_text(document, "group"),
        pipelines=tuple(pipelines),
        started_at=_time(document, "started_at"),
        heartbeat_at=_time(document, "heartbeat_at"),
    )


def advertised_url(bind_host: str, port: int, hostname: str | None = None) -> str:
    """The URL others reach a metrics endpoint bound to ``bind_host:port`` at.

    A wildcard bind (``0.0.0.0``, ``::``, empty) is reachable on every interface, which no other
    host can dial: the machine's hostname stands in for it.
    """
    host = bind_host
    if host in ("", "0.0.0.0", "::", "[::]"):
        host = hostname or socket.gethostname()
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{port}"


class WorkerAnnouncer:
    """Announces one worker every ``interval_s`` until :meth:`close`, which writes its tombstone.

    ``url`` may be changed while running (a restarted worker may bind another port); the next
    announcement carries it. :attr:`announcements` and :attr:`failures` count what happened.
    """

    def __init__(
        self,
        settings: KafkaSettings,
        *,
        worker_id: str,
        url: str,
        group: str,
        pipelines: Sequence[str],
        topic: str = DEFAULT_DISCOVERY_TOPIC,
        interval_s: float = 3.0,
        clock: Clock | None = None,
        create_topic: bool = True,
    ) -> None:
        if not 0.0 < interval_s < 3600.0:
            raise ValueError(f"interval_s must be in (0, 3600) seconds, got {interval_s!r}")
        if not worker_id:
            raise ValueError("worker_id must not be empty")
        self.topic = topic
        self.worker_id = worker_id
        self.url = url
        self.group = group
        self.pipelines = tuple(pipelines)
        self.interval_s = interval_s
        self.announcements = 0
        self.failures = 0
        self._settings = settings
        self._clock = clock or SystemClock()
        self._started_at = self._clock.now()
        self._create_topic = create_topic
        self._producer, _errors = make_producer(settings, **{"enable.idempotence": False, "acks": "all"})
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> WorkerAnnouncer:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="cadenza-announcer", daemon=True)
            self._thread.start()
        return self

    def announcement(self) -> Announcement:
        return Announcement(
            worker_id=self.worker_id,
            url=self.url,
            group=self.group,
            pipelines=self.pipelines,
            started_at=self._started_at,
            heartbeat_at=self._clock.now(),
        )

    def _ensure_topic(self) -> None:
        try:
            ensure_topics(make_admin(self._settings), [discovery_topic_spec(self.topic)], timeout=10.0)
        except Exception as exc:  # the topic may exist with another shape, or the broker be away
            _log.warning("could not create discovery topic %s: %s", self.topic, exc)
        self._create_topic = False

    def announce_once(self) -> bool:
        """Write one announcement and wait for it; ``False`` (logged, counted) when it failed."""
        sent = self._send(self.announcement().to_json())
        if sent:
            self.announcements += 1
        return sent

    def _send(self, value: bytes | None) -> bool:
        outcome: list[BaseException | None] = []

        def delivered(error: Any, _message: Any) -> None:
            outcome.append(KafkaException(error) if error is not None else None)

        try:
            key = self.worker_id.encode()
            self._producer.produce(self.topic, value=value, key=key, on_delivery=delivered)
            self._producer.flush(min(10.0, max(1.0, self.interval_s)))
            if not outcome:
                raise TimeoutError("no delivery report in time")
            if outcome[0] is not None:
                raise outcome[0]
        except Exception as exc:  # never the worker's problem: log and count
            self.failures += 1
            _log.warning("announcing worker %s on %s failed: %s", self.worker_id, self.topic, exc)
            return False
        return True

    def _run(self) -> None:
        if self._create_topic:
            self._ensure_topic()
        while not self._stop.is_set():
            self.announce_once()
            self._stop.wait(self.interval_s)

    def close(self, timeout: float = 5.0) -> None:
        """Stop announcing and write the tombstone (a clean stop: readers drop this worker).

        Idempotent: a second call writes the tombstone again, which readers treat the same.
        """
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self._send(None)
        self._producer.flush(timeout)
