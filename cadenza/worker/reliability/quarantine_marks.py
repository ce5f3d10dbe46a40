"""The marks of the poison-pill quarantine: the control records, their codec and the topic that keeps them.

A :class:`Mark` is what one worker promises about one input partition of its group (its lease, a clean
release, the record or chunk running under a marker, a death pinned exactly by a crash slot); the rule
that writes and reads them is :mod:`cadenza.worker.reliability.quarantine_book`. They live in Kafka,
not on a host, because a dead worker's partitions may be taken over anywhere: in the compacted topic
``cadenza-quarantine``, keyed by group and partition, so that only the last mark of each is kept.
The codec is JSON and forgiving on the way in (fields added later default for older marks; a record
that is not a mark reads as none), since a bad mark must never stop a worker from starting.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from cadenza.infra.kafka.topics import TopicSpec

__all__ = ["QUARANTINE_TOPIC", "Key", "Mark", "quarantine_topic_spec"]

QUARANTINE_TOPIC = "cadenza-quarantine"

#: An input partition, ``(topic, partition)``: what a mark is about (with the group, its record key).
Key = tuple[str, int]


def quarantine_topic_spec(topic: str = QUARANTINE_TOPIC) -> TopicSpec:
    """One partition (small records, read whole at each assignment), compacted by group and partition."""
    return TopicSpec(topic, partitions=1, configs={"cleanup.policy": "compact"})


@dataclass(frozen=True)
class Mark:
    """The control record of one group's input partition (see
    :mod:`cadenza.worker.reliability.quarantine_book` for what each field promises)."""

    high: int
    clean: bool
    running: int | None = None
    deaths: int = 0
    owner: str = ""
    #: ``running`` is exactly the record that was running when ``owner`` died (from its crash slot,
    #: :mod:`cadenza.worker.reliability.crash_slot`), or ``None`` exactly when none was: only that
    #: record is suspect.
    exact: bool = False
    #: Records from ``running`` the marker covers: one of ``[running, running + span)`` may be running
    #: (1: exactly ``running``; more: a chunk of the serial replay, whose death names no record).
    span: int = 1

    def encode(self) -> bytes:
        return json.dumps(
            {
                "high": self.high,
                "clean": self.clean,
                "running": self.running,
                "deaths": self.deaths,
                "owner": self.owner,
                "exact": self.exact,
                "span": self.span,
            }
        ).encode()

    @classmethod
    def decode(cls, raw: bytes | None) -> Mark | None:
        """The mark in a record; ``None`` for a tombstone or a record that is not a mark."""
        if raw is None:
            return None
        try:
            data = json.loads(raw)
            high, clean, running, deaths = data["high"], data["clean"], data["running"], data["deaths"]
            exact = data.get("exact", False)  # marks written before crash slots have none
            span = data.get("span", 1)  # nor before chunked replays
        except (ValueError, KeyError, TypeError, AttributeError):
            return None
        if not (
            isinstance(high, int)
            and isinstance(clean, bool)
            and (running is None or isinstance(running, int))
            and isinstance(deaths, int)
            and isinstance(exact, bool)
            and isinstance(span, int)
            and not isinstance(span, bool)
            and span >= 1
        ):
            return None
        return cls(high, clean, running, deaths, str(data.get("owner", "")), exact, span)
