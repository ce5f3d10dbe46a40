"""Restoring the state of stateful steps (windows, joins) of newly assigned partitions.

A partition with stateful steps must not run a record before its state is back. Restoring it inside
the assignment callback did that by stopping the whole worker: every partition, those it already
ran and those with no state at all, waited for the largest changelog of the assignment (the latency
spike of a scale-out, benchmark S5). So the callback only *starts* a restore: the partitions that
need one are assigned paused, and the worker's loop reads their changelogs a slice at a time between
runs of records (:meth:`StateRestorer.step`, ``restore_slice`` seconds each). A partition is resumed
as soon as its own changelogs are read, so small states are back in milliseconds while a large one
is still being read, and the partitions that do not move do not stop at all.

``background=False`` reads the whole restore inside the callback, as before (benchmark baselines).

A partition revoked or lost before its restore finished is dropped from it; a changelog partition no
longer needed by any assigned partition stops being read. A restore that takes longer than
``restore_timeout`` of reading fails the worker, like any restore failure: records must not run on
missing state.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, KeysView, Sequence

from confluent_kafka import Consumer

from cadenza.infra.kafka.clients import make_consumer
from cadenza.infra.kafka.errors import KafkaClientError
from cadenza.settings import KafkaSettings
from cadenza.state import ChangelogReader, ChangelogReplay, StateDecodeError
from cadenza.worker.engine.counters import WorkerCounters
from cadenza.worker.engine.idle_clock import IdleClock
from cadenza.worker.engine.operators.stateful import StatefulStep

__all__ = ["StateRestorer"]

_log = logging.getLogger("cadenza.worker")

#: An input or changelog ``(topic, partition)``.
Key = tuple[str, int]
#: What one assigned input partition needs restored: each stateful step reading it, at its partition.
Wanted = Sequence[tuple[StatefulStep, int]]


class StateRestorer:
    """Which assigned partitions wait for their state, and the (group-less) consumer reading it."""

    def __init__(
        self,
        settings: KafkaSettings,
        group: str,
        counters: WorkerCounters,
        timeout: float,
        *,
        background: bool = True,
        idle_clock: IdleClock | None = None,
        settle: Callable[[], None] | None = None,
    ) -> None:
        self._settings = settings
        self._group = group
        self._counters = counters
        self._timeout = timeout
        self.background = background
        #: Stands still while partitions wait in the background: such a partition is silent because
        #: of the worker, not because its input is (see :mod:`cadenza.worker.engine.idle_clock`).
        self._idle_clock = idle_clock
        #: Called between the slices of a restore inside the assignment callback, where the worker's
        #: loop (which otherwise freezes restored state out of the collector's walks) does not run:
        #: without it, the full collections during a large restore walk every key restored so far.
        self._settle_collector = settle
        self._reader: ChangelogReader | None = None
        self._consumer: Consumer | None = None
        #: Input partition -> the changelog partitions it still waits for.
        self._waiting: dict[Key, set[Key]] = {}
        #: Input partition -> seconds spent reading changelogs while it waited, for the timeout (the
        #: time between slices, when the worker runs records, does not count: a restore in the
        #: background must not fail where the same restore in the callback would have finished).
        self._spent: dict[Key, float] = {}
        #: Changelog partition -> the (step, partition) pairs its replay is loaded into.
        self._steps: dict[Key, list[tuple[StatefulStep, int]]] = {}
        #: Set while no partition waits: what ``Worker.wait_assigned`` waits for.
        self.settled = threading.Event()
        self.settled.set()

    @property
    def holding(self) -> KeysView[Key]:
        """Input partitions assigned and not yet restored (kept paused); a live view (read once per
        worker step, so no set is built when nothing is restoring)."""
        return self._waiting.keys()

    @property
    def restoring(self) -> bool:
        return bool(self._waiting)

    def begin(self, wanted: Iterable[tuple[Key, Wanted]]) -> list[Key]:
        """Start restoring newly assigned input partitions; return those that must wait (no record of
        theirs may run until :meth:`step` says they are ready). Without ``background`` the restore
        happens here, and nothing waits."""
        held: list[Key] = []
        changelogs: list[Key] = []
        for key, steps in wanted:
            needs: set[Key] = set()
            for step, partition in steps:
                changelog = (step.changelog_topic, partition)
                pairs = self._steps.setdefault(changelog, [])
                if (step, partition) not in pairs:
                    pairs.append((step, partition))
                needs.add(changelog)
            if needs:
                self._waiting[key] = needs
                self._spent[key] = 0.0
                held.append(key)
                changelogs.extend(needs)
        if not held:
            return []
        if self.background and self.settled.is_set() and self._idle_clock is not None:
            self._idle_clock.stall()  # the first partition to wait: unstalled in _settle
        self.settled.clear()
        self._read().start(changelogs)
        if self.background:
            return held
        while self._waiting:
            self.step(0.2)
            if self._settle_collector is not None:
                self._settle_collector()
        return []

    def step(self, seconds: float) -> list[Key]:
        """Read changelogs for about ``seconds``; return the input partitions whose state is now back."""
        if not self._waiting:
            return []
        reader = self._read()
        ready: list[Key] = []
        started = time.perf_counter()
        for changelog, replay in reader.read(seconds):
            self._load(changelog, replay)
            for key, needs in list(self._waiting.items()):
                needs.discard(changelog)
                if not needs:
                    del self._waiting[key]
                    del self._spent[key]
                    ready.append(key)
        spent = time.perf_counter() - started
        late = []
        for key in self._spent:
            self._spent[key] += spent
            if self._spent[key] > self._timeout:
                late.append(key)
        if late:
            raise KafkaClientError(
                f"could not read the changelogs of {sorted(late)} to their end within "
                f"{self._timeout:g}s of reading (restore_timeout); their state cannot be restored"
            )
        self._settle()
        return ready

    def forget(self, keys: Iterable[Key]) -> bool:
        """Assigned partitions that went before their restore finished: they wait no more, and a
        changelog partition no other waiting partition needs stops being read. Returns whether some
        partition still waits."""
        if not self._waiting:
            return False
        for key in keys:
            self._waiting.pop(key, None)
            self._spent.pop(key, None)
        needed = set().union(*self._waiting.values()) if self._waiting else set()
        unneeded = [changelog for changelog in self._steps if changelog not in needed]
        for changelog in unneeded:
            del self._steps[changelog]
        if self._reader is not None:
            self._reader.stop(unneeded)
        self._settle()
        return bool(self._waiting)

    def _settle(self) -> None:
        """After partitions stopped waiting (some did before): once none does, say so, and let the
        idle clock run again."""
        if self._waiting:
            return
        self.settled.set()
        if self.background and self._idle_clock is not None:
            self._idle_clock.unstall()

    def _load(self, changelog: Key, replay: ChangelogReplay) -> None:
        """Load a changelog partition read to its end into the steps waiting for it."""
        steps = self._steps.pop(changelog, [])
        if not steps:
            return
        try:
            entries = replay.entries()
        except StateDecodeError as exc:  # never drop state silently: the restore (and the worker) fails
            names = ", ".join(repr(window.node_id) for window, _ in steps)
            where = f"{changelog[0]}[{changelog[1]}]"
            raise StateDecodeError(f"cannot restore {where} (step {names}): {exc}") from exc
        for window, partition in steps:
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

    def _read(self) -> ChangelogReader:
        if self._reader is None:
            consumer, errors = make_consumer(
                self._settings,
                f"{self._group}-restore-{uuid.uuid4().hex[:8]}",
                **{"fetch.wait.max.ms": 50, "enable.partition.eof": True},
            )
            self._reader, self._consumer = ChangelogReader(consumer, errors), consumer
        return self._reader

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
        self._reader = self._consumer = None
