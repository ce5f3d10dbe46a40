"""Restoring the state of stateful steps (windows, joins) when partitions are assigned.

Runs inside the consumer's assignment callback, so a partition's state (and its position: which
input it already holds) is back before the first record of that partition is fetched. All changelog
partitions of one assignment are read together by one consumer outside the group.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence

from confluent_kafka import Consumer

from cadenza.infra.kafka.clients import ClientErrors, make_consumer
from cadenza.settings import KafkaSettings
from cadenza.state import StateDecodeError, restore_changelogs
from cadenza.worker.counters import WorkerCounters
from cadenza.worker.operators.stateful import StatefulStep

__all__ = ["StateRestorer"]

_log = logging.getLogger("cadenza.worker")


class StateRestorer:
    """Reads changelogs back into stateful steps; owns the (group-less) restore consumer."""

    def __init__(self, settings: KafkaSettings, group: str, counters: WorkerCounters, timeout: float) -> None:
        self._settings = settings
        self._group = group
        self._counters = counters
        self._timeout = timeout
        self._consumer: tuple[Consumer, ClientErrors] | None = None

    def restore(self, wanted: Sequence[tuple[StatefulStep, int]]) -> None:
        """Restore each (stateful step, input partition) from its changelog partition.

        Both inputs of a join may be listed for one partition: the changelog partition is read once.
        """
        if not wanted:
            return
        if self._consumer is None:
            self._consumer = make_consumer(
                self._settings, f"{self._group}-restore-{uuid.uuid4().hex[:8]}", **{"fetch.wait.max.ms": 50}
            )
        consumer, errors = self._consumer
        replays = restore_changelogs(
            self._settings,
            consumer,
            errors,
            list(dict.fromkeys((window.changelog_topic, partition) for window, partition in wanted)),
            timeout=self._timeout,
        )
        for window, partition in wanted:
            replay = replays[(window.changelog_topic, partition)]
            try:
                entries = replay.entries()
            except StateDecodeError as exc:  # never drop state silently: the restore (and the worker) fails
                raise StateDecodeError(
                    f"cannot restore {window.changelog_topic}[{partition}] (step {window.node_id!r}): {exc}"
                ) from exc
            window.restore(partition, entries, replay.position)
            self._counters.restored_records += replay.records
            self._counters.restored_keys += len(entries)
            if replay.records:
                _log.info(
                    "restored %s[%d]: %d keys from %d changelog records (%d uncommitted discarded); %s",
                    window.changelog_topic,
                    partition,
                    len(entries),
                    replay.records,
                    replay.discarded,
                    replay.position,
                )

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer[0].close()
            self._consumer = None
