"""Poison-pill quarantine: a record that was running at two deaths of its worker is not run a third time.

A record can kill the process that runs it where no ``try`` helps: a segfault in a C extension, an
OOM kill, a hang past ``max.poll.interval.ms`` (the group then declares the partitions lost). Its
partition's next owner reads again from the committed offset, runs the same record and dies the same
way, forever. The rule: a record that was running when the worker died or was declared lost twice
in a row is dead-lettered the next time, with disposition ``quarantined``, and the pipeline goes on.

It is kept in Kafka (a worker may come back on another host), in the compacted control topic
``cadenza-quarantine``, as one *mark* per group and input partition (a :class:`Mark`):

- **A lease, off the per-record path.** ``high`` promises that no record at or above it was handed
  to user code. A worker extends it before it runs records beyond it, checked once per fetched
  batch, by ``min_lease`` records (100) or about a second of the partition's fetch rate, whichever
  is more. It renews the lease early, once half of it is fetched, without waiting for the broker
  (:meth:`QuarantineBook.renew`): the renewal is acknowledged long before the records reach the old
  ``high``, so the worker waits (produce and flush) only when records outrun an unacknowledged
  renewal, or for a partition's first lease. Waiting for every extension held the whole worker for
  a broker round trip (about 100 ms on the embedded broker) about once a second per busy partition.
  The lease the book counts on is always an acknowledged one, and every mark carries the highest
  ``high`` written, so the log's last mark never promises less than a record that ran.
- **A clean release clears it.** A revoke or stop that committed what finished writes
  ``clean=True``. A mark that is not clean when the partition is assigned again means the previous
  owner died with records in ``[committed offset, high)`` possibly handed to user code.
- **Then alone, in chunks behind markers.** The new owner runs those records alone (nothing else
  runs meanwhile), behind durable markers (``running`` = an offset, ``span`` = how many records from
  it the marker covers, produced and flushed before they run). A range of up to
  :data:`CHUNKED_ABOVE` records is run one record per marker, so a death there pins the exact
  record. A longer one (a lease covers about a second of the fetch rate: thousands of records under
  load) is run in chunks of ``ceil(sqrt(range))`` records per marker: a flush per record held the
  whole worker, every tenant, for a broker round trip per record (a CI run's successor of a worker
  killed during a backlog got through 12,001 records in 96 s), while ``2 * sqrt(range)`` flushes
  find the record in two deaths. A death inside a chunk names the chunk; its next owner runs that
  chunk one record per marker (and the rest of the range in chunks again). The first record at or
  above the range ends the suspicion (the marker is cleared before it runs).
- **The range ends where the partition ended.** A lease may promise records that did not exist yet
  (a second of a fast fetch rate, over a partition that then went quiet). No record at or above the
  partition's end offset, read by the new owner after it was assigned the partition, existed when
  the previous owner died, so none of them can have killed it: the range is cut there
  (:meth:`QuarantineBook.bound`), before its chunks are sized. Records produced after the death run
  as usual.
- **Two deaths pin a poison pill.** A mark whose ``running`` record was already the marker at the
  death before (``deaths`` carries the count) makes it the second death of that record: it is
  dead-lettered (``quarantined``, value, key and headers kept, the reason naming the deaths) and
  skipped. A record that dies once but passes on its retry is not quarantined: the next marker
  carries no deaths for it.
- **A hang is a death too.** A watchdog thread sees a user call running past ``hang_timeout``
  (default: 80 % of ``max.poll.interval.ms``): it writes the marker itself and logs an ERROR, so the
  hang is pinned even before the group declares the partitions lost. If the call returns before
  ``max.poll.interval.ms`` the marker is cleared; if it runs past it, the worker is failed (a
  :class:`HungRecordError`, so ``cadenza worker`` starts a fresh worker in place, which reads the
  mark and counts the death) and ``/healthz`` reports it dead meanwhile.

- **A crash slot makes a death exact.** A worker that starts on the host where one of its group died
  reads the dead worker's crash slot (:mod:`cadenza.worker.reliability.crash_slot`: the record it was running,
  kept in a memory-mapped file) and, before it joins, rewrites the marks of the partitions the dead
  worker still held (:func:`slot_pins`): ``exact``, naming the record that was running or none. Only
  that record is then suspect: the records before it run alone without markers (to keep offset
  order), it runs alone behind its marker, the rest as usual. So a poison pill dies twice. The new
  owner writes a mark of its own (not exact) before it runs anything: should it die where no slot
  can tell, the range rule below applies to its death.

Without a slot, the first death of a record that ran outside the serial mode is not pinned (only its
range is), so the rule quarantines a record at the third death at most: one that narrows the range,
two pinned; in a range longer than :data:`CHUNKED_ABOVE`, at the fourth (one more narrows the chunk).
A chunk's death counts for none of its records: only a marker of one record carries ``deaths``.

The watchdog finds the running record of the normal path without any per-record bookkeeping: it
reads the locals ``unit``, ``started`` and ``finished`` of the worker's quantum loop (the code object
given to :meth:`QuarantineGuard.watch`) in the worker thread's frame.
"""

from __future__ import annotations

import json
import logging
import math
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from types import CodeType, FrameType
from typing import Protocol

from confluent_kafka import KafkaError, Message, TopicPartition

from cadenza.infra.kafka.clients import DeliveryReport, flush_or_raise, make_consumer, make_producer
from cadenza.infra.kafka.errors import KafkaClientError
from cadenza.infra.kafka.offsets import end_offsets
from cadenza.infra.kafka.topics import TopicSpec
from cadenza.settings import KafkaSettings
from cadenza.worker.reliability.crash_slot import CrashSlot, SlotState


class Admitting(Protocol):
    """What the guard needs of the engine (:class:`~cadenza.worker.engine.engine.Engine`): admit a
    batch as usual, run one record alone, or dead-letter one without running it."""

    def admit(self, messages: list[Message]) -> None: ...

    def run_alone(self, message: Message, topic: str, partition: int, offset: int) -> None: ...

    def dead_letter_alone(
        self, message: Message, topic: str, partition: int, offset: int, why: str
    ) -> None: ...


__all__ = [
    "CHUNKED_ABOVE",
    "LEASE_SECONDS",
    "MIN_LEASE",
    "QUARANTINE_TOPIC",
    "HangEvent",
    "HangTracker",
    "HungRecordError",
    "Mark",
    "QuarantineBook",
    "QuarantineGuard",
    "Route",
    "quarantine_topic_spec",
    "slot_pins",
]

QUARANTINE_TOPIC = "cadenza-quarantine"
#: Records a lease covers at least (see the module docstring).
MIN_LEASE = 100
#: Seconds of a partition's recent fetch rate a lease covers: about one extension per second.
LEASE_SECONDS = 1.0
#: Suspect ranges up to this many records are replayed one record per marker; longer ones in chunks
#: of ``ceil(sqrt(range))`` records per marker (see the module docstring).
CHUNKED_ABOVE = 128

Key = tuple[str, int]

_log = logging.getLogger("cadenza.worker")


def quarantine_topic_spec(topic: str = QUARANTINE_TOPIC) -> TopicSpec:
    """One partition (small records, read whole at each assignment), compacted by group and partition."""
    return TopicSpec(topic, partitions=1, configs={"cleanup.policy": "compact"})


class HungRecordError(KafkaClientError):
    """A user call ran past ``max.poll.interval.ms``: the group has declared the partitions lost.

    A :class:`KafkaClientError` so that the supervisor starts a fresh worker in place.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message, code="_MAX_POLL_EXCEEDED", retriable=True)


@dataclass(frozen=True)
class Mark:
    """The control record of one group's input partition (see the module docstring)."""

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


class Route(Enum):
    """What to do with a fetched record of a guarded partition."""

    RUN = "run"  # the usual way, through the scheduler
    ALONE = "alone"  # alone, behind a durable marker
    QUARANTINE = "quarantine"  # dead-letter it, do not run it


@dataclass
class _Partition:
    lease: int = 0
    #: The fetch position, and the caller's clock, at the last lease extension (or the assignment).
    base: int = 0
    base_time: float = 0.0
    #: Records below this offset run alone (0: none).
    suspect_below: int = 0
    #: The record the last death was pinned on, and how many deaths in a row it has; or, with
    #: ``pinned_span`` above 1, the first record of the chunk that was running at it (no deaths).
    pinned: int | None = None
    deaths: int = 0
    pinned_span: int = 1
    #: Records per marker for the rest of the range (0: not decided yet), and the chunk whose marker
    #: is the last one written, ``[chunk_start, chunk_end)``.
    chunk: int = 0
    chunk_start: int = 0
    chunk_end: int = 0
    #: A record the watchdog pinned in the normal path (marker written by the watchdog).
    hung: int | None = None
    previous_owner: str = ""
    #: The previous owner's death was pinned exactly (a crash slot): only ``pinned`` is suspect.
    exact: bool = False
    #: This worker must write a mark of its own before any record of the partition runs (it took over
    #: an exact mark, which names the dead owner: a death of this worker must not be read as that one's).
    claim_due: bool = False
    #: The ``high`` of a renewal written and not yet acknowledged (not above ``lease``: none).
    renewal: int = 0
    #: The fetch position past which the lease is renewed early (half of it fetched).
    renew_at: int = 0
    #: The suspect range was cut at the partition's end offset (:meth:`QuarantineBook.bound`).
    bounded: bool = False


@dataclass
class QuarantineBook:
    """The pure state machine: per partition, which records run how, and which marks to write.

    Every method returns the marks to write (produced and flushed by the caller before the records
    they cover run); nothing here touches Kafka or a clock.
    """

    owner: str
    min_lease: int = MIN_LEASE
    parts: dict[Key, _Partition] = field(default_factory=dict)
    #: Longest suspect range replayed one record per marker (see :data:`CHUNKED_ABOVE`).
    chunked_above: int = CHUNKED_ABOVE
    #: After a hang past the poll interval: this worker writes nothing more (it is being replaced).
    frozen: bool = False

    def _mark(self, part: _Partition, **changes: object) -> Mark:
        # The highest high written: a mark written after an unacknowledged renewal must not promise less.
        mark = Mark(max(part.lease, part.renewal), False, part.hung, 0, self.owner)
        return replace(mark, **changes)  # type: ignore[arg-type]

    @property
    def suspect(self) -> bool:
        """Whether some partition has records to run alone or to quarantine."""
        return any(part.suspect_below for part in self.parts.values())

    def assigned(self, key: Key, mark: Mark | None, now: float = 0.0) -> _Partition:
        """Start guarding ``key``, given the last mark of its previous owner (``None``: never marked)."""
        part = self.parts[key] = _Partition(base_time=now)
        if mark is None or mark.clean:
            return part
        part.previous_owner = mark.owner
        part.lease = mark.high
        if mark.exact:
            part.exact = part.claim_due = True
            if mark.running is not None:
                part.pinned = mark.running
                part.deaths = mark.deaths + 1
                part.suspect_below = mark.running + 1
            return part
        part.suspect_below = mark.high
        if mark.running is not None:
            part.pinned = mark.running
            if mark.span > 1:  # a chunk died: which of its records was running is not known
                part.pinned_span = mark.span
            else:
                part.deaths = mark.deaths + 1
            part.suspect_below = max(part.suspect_below, mark.running + mark.span)
        return part

    def bound(self, key: Key, end: int) -> int | None:
        """Cut ``key``'s suspect range at ``end``, the partition's end offset (high watermark) read
        after this worker was assigned it; returns the range's old end if it was cut.

        A dead owner could only have run records it fetched, all below the end offset at its death,
        which is at most ``end``: records at or above it were produced since. Call it before the
        partition's records are routed, so that chunks are sized for the records that exist.
        """
        part = self.parts.get(key)
        if part is None or not part.suspect_below:
            return None
        part.bounded = True
        if end >= part.suspect_below:
            return None
        old = part.suspect_below
        # The pinned record existed (it was running): it stays in the range, whatever ``end`` says.
        part.suspect_below = max(end, 0 if part.pinned is None else part.pinned + 1)
        return old if part.suspect_below < old else None

    def route(self, key: Key, offset: int) -> tuple[Route, Mark | None]:
        """How to run fetched record ``offset`` of ``key``, and the mark to write before it runs."""
        part = self.parts.get(key)
        if part is None or not part.suspect_below:
            return Route.RUN, None
        if offset >= part.suspect_below:
            # Past the range the previous owner may have reached: suspicion over, marker cleared.
            part.suspect_below = 0
            part.pinned = None
            part.deaths = 0
            part.pinned_span = 1
            part.chunk = part.chunk_start = part.chunk_end = 0
            part.claim_due = False
            return Route.RUN, None if self.frozen else self._mark(part)
        pinned = part.pinned
        if pinned == offset and part.pinned_span == 1 and part.deaths >= 2:
            return Route.QUARANTINE, None
        if part.exact and pinned != offset:
            # Before the exactly pinned record: not running at the death, so no marker. Alone all the
            # same, so that it runs before the pinned record (offset order within a partition).
            return Route.ALONE, self._claim(part)
        part.lease = max(part.lease, offset + 1)
        part.claim_due = False
        if self.frozen:
            return Route.ALONE, None
        if pinned is not None and pinned <= offset < pinned + part.pinned_span:
            # The record, or a record of the chunk, running at the last death: one per marker.
            deaths = part.deaths if part.pinned_span == 1 else 0
            return Route.ALONE, self._mark(part, running=offset, deaths=deaths)
        if part.chunk_start <= offset < part.chunk_end:
            return Route.ALONE, None  # covered by its chunk's marker
        if not part.chunk:
            left = part.suspect_below - offset
            part.chunk = math.isqrt(left - 1) + 1 if left > self.chunked_above else 1
        end = min(offset + part.chunk, part.suspect_below)
        if pinned is not None and offset < pinned:
            end = min(end, pinned)  # the pinned record, or chunk, runs under markers of its own
        part.chunk_start, part.chunk_end = offset, end
        return Route.ALONE, self._mark(part, running=offset, span=end - offset)

    def _claim(self, part: _Partition) -> Mark | None:
        """The mark that makes a taken-over partition this worker's, if it has not written one yet.

        It names no running record and is not exact: should this worker die without a crash slot to
        say where, its next owner falls back to the range rule."""
        if not part.claim_due or self.frozen:
            return None
        part.claim_due = False
        return self._mark(part)

    def quarantined(self, key: Key, offset: int) -> None:
        """``offset`` was dead-lettered: its deaths are settled."""
        part = self.parts.get(key)
        if part is not None and part.pinned == offset:
            part.pinned = None
            part.deaths = 0

    def leases(self, fetched: Iterable[tuple[Key, int]], now: float = 0.0) -> list[tuple[Key, Mark]]:
        """Extended leases for partitions fetched beyond theirs (``fetched``: the next offset to run).

        ``now`` (seconds, any monotonic clock) sizes the new lease to about ``LEASE_SECONDS`` of the
        partition's fetch rate since the last extension.
        """
        if self.frozen:
            return []
        due: list[tuple[Key, Mark]] = []
        parts = self.parts
        for key, position in fetched:
            part = parts.get(key)
            if part is None or (position <= part.lease and not part.claim_due):
                continue
            part.claim_due = False
            if position > part.lease:
                part.lease = self._extended(part, position, now)
            due.append((key, self._mark(part)))
        return due

    def renew(self, fetched: Iterable[tuple[Key, int]], now: float = 0.0) -> list[tuple[Key, Mark, int]]:
        """Early renewals, to write without waiting: ``(key, mark, high)`` for each normal partition
        fetched past half of its lease with no renewal in flight. The book counts on ``high`` only
        once :meth:`acknowledged` says so; until then :meth:`leases` still asks to wait past the old one."""
        if self.frozen:
            return []
        due: list[tuple[Key, Mark, int]] = []
        parts = self.parts
        for key, position in fetched:
            part = parts.get(key)
            if (
                part is None
                or part.suspect_below
                or part.claim_due
                or not part.lease
                or position <= part.renew_at
                or part.renewal > part.lease
            ):
                continue
            part.renewal = high = self._extended(part, position, now)
            due.append((key, self._mark(part), high))
        return due

    def acknowledged(self, key: Key, high: int, part: object) -> None:
        """A renewal of ``high`` for ``key`` is durable (``part``: the :class:`_Partition` it was
        written for; a partition released and assigned again since is another one)."""
        current = self.parts.get(key)
        if current is part and current is not None and high > current.lease:
            current.lease = high

    def _extended(self, part: _Partition, position: int, now: float) -> int:
        """A new lease from ``position``: ``min_lease`` records or about ``LEASE_SECONDS`` of the
        partition's fetch rate since the last extension, whichever is more."""
        elapsed = max(now - part.base_time, 1e-3)
        span = max(self.min_lease, math.ceil((position - part.base) / elapsed * LEASE_SECONDS))
        part.base, part.base_time = position, now
        part.renew_at = position + span // 2
        return position + span

    def released(self, key: Key) -> Mark | None:
        """A clean release (revoke or stop after a commit): the mark says so, unless frozen."""
        part = self.parts.pop(key, None)
        if part is None or self.frozen:
            return None
        return Mark(max(part.lease, part.renewal), True, None, 0, self.owner)

    def forget(self, key: Key) -> None:
        """The partition was lost: nothing is written (its next owner must see the death)."""
        self.parts.pop(key, None)

    def pin(self, key: Key, offset: int) -> Mark | None:
        """The watchdog saw ``offset`` hang: the marker it writes."""
        part = self.parts.get(key)
        if part is None or self.frozen:
            return None  # not owned any more
        if part.suspect_below:
            # In the serial mode a one-record marker is already durable; a chunk's is narrowed to the
            # hanging record (and stays so: the next chunk's marker replaces it).
            if part.chunk_end - part.chunk_start > 1 and part.chunk_start <= offset < part.chunk_end:
                return self._mark(part, running=offset)
            return None
        part.hung = offset
        return self._mark(part)

    def unpin(self, key: Key, offset: int) -> Mark | None:
        """The hanging call returned before the poll interval: the marker is cleared."""
        part = self.parts.get(key)
        if part is None or self.frozen or part.hung != offset:
            return None
        part.hung = None
        return self._mark(part)


def slot_pins(state: SlotState, marks: Mapping[Key, Mark | None]) -> list[tuple[Key, Mark]]:
    """The exact marks a dead worker's crash slot makes of its partitions' marks (pure).

    Only a partition whose mark is still unclean and still the dead owner's counts (nobody ran it
    since, or released it). Its new mark names the record that was running (with the deaths that
    record already had, if the mark already named it), or none: it was running nothing. A slot that
    could not name its running record, or names one the lease says was never handed to user code,
    changes nothing: the range rule decides.
    """
    if state.unknown:
        return []
    culprit = state.culprit
    pins: list[tuple[Key, Mark]] = []
    for key in state.partitions:
        mark = marks.get(key)
        if mark is None or mark.clean or mark.owner != state.owner:
            continue
        running = culprit[1] if culprit is not None and culprit[0] == key else None
        if running is not None and running >= mark.high:
            continue
        deaths = mark.deaths if running is not None and mark.running == running else 0
        pin = Mark(mark.high, False, running, deaths, mark.owner, exact=True)
        if pin != mark:
            pins.append((key, pin))
    return pins


class HangEvent(Enum):
    PIN = "pin"  # past hang_timeout
    DEAD = "dead"  # past the poll interval
    RETURNED = "returned"  # a pinned call returned before the poll interval


@dataclass
class HangTracker:
    """The watchdog's decisions from what it observes, on the caller's clock (pure)."""

    hang_timeout: float
    poll_interval: float
    current: tuple[Key, int, float] | None = None
    pinned: bool = False
    dead: bool = False

    def observe(self, now: float, running: tuple[Key, int, float] | None) -> list[HangEvent]:
        """``running``: (partition, offset, start) of the user call running now, or ``None``."""
        events: list[HangEvent] = []
        if running != self.current:
            if self.pinned and not self.dead:
                events.append(HangEvent.RETURNED)
            self.current, self.pinned, self.dead = running, False, False
        if running is None:
            return events
        elapsed = now - running[2]
        if elapsed >= self.hang_timeout and not self.pinned:
            self.pinned = True
            events.append(HangEvent.PIN)
        if elapsed >= self.poll_interval and not self.dead:
            self.dead = True
            events.append(HangEvent.DEAD)
        return events


def running_unit(frame: FrameType | None, code: CodeType) -> tuple[Key, int, float] | None:
    """(partition, offset, start) of the record a quantum loop runs, from the worker thread's frame."""
    while frame is not None and frame.f_code is not code:
        frame = frame.f_back
    if frame is None:
        return None
    local = frame.f_locals
    unit, started, finished = local.get("unit"), local.get("started"), local.get("finished")
    if unit is None or not isinstance(started, float):
        return None
    if isinstance(finished, float) and finished >= started:
        return None  # between two records
    return (unit.topic, unit.partition), unit.offset, started


class QuarantineGuard:
    """The Kafka side: reads marks at assignment, writes them, runs records alone, watches for hangs."""

    def __init__(
        self,
        settings: KafkaSettings,
        group: str,
        owner: str,
        *,
        hang_timeout: float,
        poll_interval: float,
        topic: str = QUARANTINE_TOPIC,
        timeout: float = 30.0,
        min_lease: int = MIN_LEASE,
    ) -> None:
        self.settings = settings
        self.group = group
        self.topic = topic
        self.timeout = timeout
        self.book = QuarantineBook(owner, min_lease)
        self.hang_timeout = hang_timeout
        self.poll_interval = poll_interval
        #: Quarantined records per input topic (``cadenza_records_quarantined_total``).
        self.quarantined: dict[str, int] = {}
        #: Set by the watchdog on a hang past the poll interval; the worker raises it.
        self.failure: HungRecordError | None = None
        self._lock = threading.Lock()
        self._producer, self._producer_errors = make_producer(settings)
        #: Acknowledged early renewals ``(key, high, partition)``, applied at the next extend.
        self._acks: list[tuple[Key, int, object]] = []
        self._marks: dict[str, Mark | None] = {}
        self._position = 0
        #: (partition, offset, start) of the record running alone, for the watchdog.
        self._alone: tuple[Key, int, float] | None = None
        #: This process's crash slot (set by the worker once it is settled), or ``None``.
        self.slot: CrashSlot | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- the control topic ------------------------------------------------------------------------------

    def _key(self, key: Key) -> bytes:
        return json.dumps([self.group, key[0], key[1]]).encode()

    def _write(self, marks: list[tuple[Key, Mark]]) -> None:
        if not marks:
            return
        report = DeliveryReport()
        for key, mark in marks:
            self._producer.produce(self.topic, mark.encode(), self._key(key), on_delivery=report)
        flush_or_raise(self._producer, report, self.timeout, self._producer_errors)
        self._producer_errors.raise_fatal()

    def _read(self) -> None:
        """Read the control topic from where the last read stopped to its true end."""
        end = end_offsets(self.settings, [(self.topic, 0)], self.timeout)[(self.topic, 0)]
        if end <= self._position:
            return
        consumer, errors = make_consumer(
            self.settings, f"cadenza-quarantine-reader-{uuid.uuid4().hex}", **{"fetch.wait.max.ms": 50}
        )
        mine = json.dumps([self.group])[:-1] + ","
        try:
            consumer.assign([TopicPartition(self.topic, 0, self._position)])
            deadline = time.monotonic() + self.timeout
            while self._position < end:
                if time.monotonic() > deadline:
                    raise KafkaClientError(
                        f"could not read {self.topic!r} to its end within {self.timeout:.0f} s"
                    )
                errors.raise_fatal()
                message = consumer.poll(0.2)
                if message is None or message.error() is not None:
                    continue
                offset = message.offset()
                if offset is not None:
                    self._position = max(self._position, offset + 1)
                key = message.key()
                if key is not None and key.decode(errors="replace").startswith(mine):
                    self._marks[key.decode(errors="replace")] = Mark.decode(message.value())
        finally:
            consumer.close()

    # -- the worker's hooks -----------------------------------------------------------------------------

    def recover(self, dead: list[SlotState]) -> None:
        """Turn what dead workers' crash slots say into exact marks, before this worker joins the group."""
        if not dead:
            return
        self._read()
        pins: list[tuple[Key, Mark]] = []
        for state in dead:
            if state.unknown:
                _log.warning(
                    "the crash slot of dead worker %s cannot name the record it was running; its "
                    "partitions' marks decide",
                    state.owner,
                )
                continue
            marks = {key: self._marks.get(self._key(key).decode()) for key in state.partitions}
            found = slot_pins(state, marks)
            culprit = state.culprit
            for key, pin in found:
                if pin.running is not None:
                    _log.warning(
                        "worker %s died while %s[%d]@%d was running (its crash slot says so%s): that record "
                        "is pinned exactly, the other records of its lease run as usual",
                        state.owner,
                        key[0],
                        key[1],
                        pin.running,
                        ", a hang past max.poll.interval.ms" if state.hung is not None else "",
                    )
            if found and (culprit is None or all(pin.running is None for _, pin in found)):
                _log.info(
                    "worker %s died running no record of %s (its crash slot says so): they need no "
                    "replay one at a time",
                    state.owner,
                    ", ".join(f"{key[0]}[{key[1]}]" for key, _ in found),
                )
            pins.extend(found)
        self._write(pins)
        for key, pin in pins:  # what the next read would find
            self._marks[self._key(key).decode()] = pin

    @property
    def suspect(self) -> bool:
        return self.book.suspect

    def assigned(self, partitions: list[TopicPartition]) -> None:
        """Read the partitions' marks and decide how their first records run (in the assign callback)."""
        if not partitions:
            return
        self._read()
        unclean: list[str] = []
        with self._lock:
            for tp in partitions:
                key = (tp.topic, tp.partition)
                mark = self._marks.get(self._key(key).decode())
                part = self.book.assigned(key, mark, time.monotonic())
                if not part.suspect_below:
                    continue
                if part.pinned is not None and part.pinned_span > 1:
                    _log.error(
                        "%s[%d]: its previous owner (%s) died or was declared lost while one of offsets "
                        "%d-%d was running; those run one record per marker, the rest of the records "
                        "below offset %d alone, in chunks behind markers",
                        tp.topic,
                        tp.partition,
                        part.previous_owner or "?",
                        part.pinned,
                        part.pinned + part.pinned_span - 1,
                        part.suspect_below,
                    )
                elif part.pinned is not None:
                    _log.error(
                        "%s[%d]: its previous owner (%s) died or was declared lost while offset %d was "
                        "running (death %d of that record in a row); %s%s",
                        tp.topic,
                        tp.partition,
                        part.previous_owner or "?",
                        part.pinned,
                        part.deaths,
                        "that record runs alone behind a marker"
                        if part.exact
                        else f"records below offset {part.suspect_below} run alone behind markers",
                        "; that record is quarantined" if part.deaths >= 2 else "",
                    )
                else:
                    unclean.append(f"{tp.topic}[{tp.partition}] below offset {part.suspect_below}")
        if unclean:  # one line per assignment: a crash under load leaves many partitions unclean
            _log.warning(
                "partitions not released cleanly by their previous owner: %s; those records run alone "
                "behind markers (one record per marker up to %d, in chunks beyond), so that a record that "
                "kills the worker is pinned",
                ", ".join(unclean),
                self.book.chunked_above,
            )

    def released(self, partitions: list[TopicPartition]) -> None:
        """A clean revoke or stop (after its commit): the partitions' suspicion is cleared."""
        with self._lock:
            marks = [
                (k, m)
                for k in ((tp.topic, tp.partition) for tp in partitions)
                if (m := self.book.released(k))
            ]
        self._write(marks)

    def lost(self, partitions: list[TopicPartition]) -> None:
        with self._lock:
            for tp in partitions:
                self.book.forget((tp.topic, tp.partition))

    def extend(self, fetched: Iterable[tuple[Key, int]]) -> None:
        """Before queued records run: extend the leases they would pass, waiting; renew early those
        half used, without waiting (see the module's docstring). Once per batch at most."""
        positions = list(fetched)
        self._producer.poll(0)  # serves the renewals' acknowledgements
        with self._lock:
            book = self.book
            acks, self._acks = self._acks, []
            for key, high, part in acks:
                book.acknowledged(key, high, part)
            now = time.monotonic()
            marks = book.leases(positions, now)
            renewals = [(key, mark, high, book.parts[key]) for key, mark, high in book.renew(positions, now)]
        self._write(marks)
        for key, mark, high, part in renewals:
            self._producer.produce(
                self.topic, mark.encode(), self._key(key), on_delivery=self._renewed(key, high, part)
            )

    def _renewed(self, key: Key, high: int, part: object) -> Callable[[KafkaError | None, Message], None]:
        # Runs on whichever thread serves the producer (maybe the watchdog's, holding the lock): it
        # only queues the acknowledgement, which the next extend applies. A failed renewal is not
        # applied, so records reaching the old lease wait for a flushed one, which raises.
        def delivered(error: KafkaError | None, _: Message) -> None:
            if error is None:
                self._acks.append((key, high, part))

        return delivered

    def admit(
        self, engine: Admitting, messages: list[Message], end_offset: Callable[[str, int], int | None]
    ) -> None:
        """Admit a batch while some partition is suspect: its records in range run alone, in order.

        ``end_offset(topic, partition)``: the partition's high watermark as of the last fetch (no
        broker round trip), or ``None`` if not known; it cuts a suspect range (:meth:`QuarantineBook.bound`).
        """
        normal: list[Message] = []
        bounded: set[Key] = set()
        for message in messages:
            topic, partition, offset = message.topic(), message.partition(), message.offset()
            if message.error() is not None or topic is None or partition is None or offset is None:
                normal.append(message)
                continue
            key = (topic, partition)
            if key not in bounded:
                bounded.add(key)
                self._bound(key, offset, end_offset)
            with self._lock:
                route, mark = self.book.route(key, offset)
            if mark is not None:
                self._write([(key, mark)])
            if route is Route.RUN:
                normal.append(message)
                continue
            if normal:
                engine.admit(normal)
                normal = []
            if route is Route.QUARANTINE:
                self._quarantine(engine, message, key, offset)
            else:
                self._run_alone(engine, message, key, offset)
            if self.failure is not None:
                raise self.failure
        if normal:
            engine.admit(normal)

    def _bound(self, key: Key, offset: int, end_offset: Callable[[str, int], int | None]) -> None:
        """Cut ``key``'s suspect range at the partition's end offset, once, at its first batch (at
        least past ``offset``, a record fetched, should the watermark lag it)."""
        with self._lock:
            part = self.book.parts.get(key)
            if part is None or not part.suspect_below or part.bounded:
                return
        end = end_offset(*key)
        if end is None:
            return  # not known yet: the range stands (the next batch asks again)
        with self._lock:
            cut = self.book.bound(key, max(end, offset + 1))
            below = part.suspect_below
        if cut is not None:  # a warning, as the assignment's line that named the longer range
            _log.warning(
                "%s[%d]: the suspect range ends at offset %d, the partition's end after the previous "
                "owner died (its lease promised up to %d); the records from there were produced since "
                "and run as usual",
                key[0],
                key[1],
                below,
                cut,
            )

    def _quarantine(self, engine: Admitting, message: Message, key: Key, offset: int) -> None:
        with self._lock:
            deaths = self.book.parts[key].deaths if key in self.book.parts else 2
            self.book.quarantined(key, offset)
        why = (
            f"quarantined: the worker died or was declared lost {deaths} times in a row while this record "
            f"was running (a crash, an OOM kill or a hang past max.poll.interval.ms); it was not run again"
        )
        _log.error("%s[%d]@%d %s", key[0], key[1], offset, why)
        engine.dead_letter_alone(message, key[0], key[1], offset, why)
        self.quarantined[key[0]] = self.quarantined.get(key[0], 0) + 1

    def _run_alone(self, engine: Admitting, message: Message, key: Key, offset: int) -> None:
        slot = self.slot
        if slot is not None:  # what this process runs, for its successor should it die here
            slot.running(key, offset)
        self._alone = (key, offset, time.perf_counter())
        try:
            engine.run_alone(message, key[0], key[1], offset)
        finally:
            self._alone = None
        if slot is not None:
            slot.idle()

    # -- the watchdog -----------------------------------------------------------------------------------

    def watch(self, thread_id: int, code: CodeType, on_dead: Callable[[HungRecordError], None]) -> None:
        """Start the watchdog over the worker thread ``thread_id`` whose quantum loop is ``code``."""
        if self._thread is not None:
            return
        tracker = HangTracker(self.hang_timeout, self.poll_interval)
        interval = max(0.05, min(1.0, self.hang_timeout / 4))

        def loop() -> None:
            while not self._stop.wait(interval):
                running = self._alone or running_unit(sys._current_frames().get(thread_id), code)
                for event in tracker.observe(time.perf_counter(), running):
                    self._on_hang(event, tracker, on_dead)

        self._thread = threading.Thread(target=loop, name="cadenza-hang-watchdog", daemon=True)
        self._thread.start()

    def _on_hang(
        self, event: HangEvent, tracker: HangTracker, on_dead: Callable[[HungRecordError], None]
    ) -> None:
        current = tracker.current
        if current is None:
            return
        key, offset, _started = current
        where = f"{key[0]}[{key[1]}]@{offset}"
        if event is HangEvent.PIN:
            with self._lock:
                mark = self.book.pin(key, offset)
            try:
                self._write([(key, mark)] if mark is not None else [])
            except KafkaClientError as exc:
                _log.error("could not write the marker of %s: %s", where, exc)
            _log.error(
                "a user function has run for more than %.1f s on %s; it counts as a death of that record if "
                "it runs past max.poll.interval.ms (%.0f s), and a record running at two deaths is "
                "quarantined",
                self.hang_timeout,
                where,
                self.poll_interval,
            )
        elif event is HangEvent.DEAD:
            with self._lock:
                self.book.frozen = True
            slot = self.slot
            if slot is not None:  # the death the group declared is pinned on this record, whatever runs next
                slot.hung(key, offset)
            self.failure = HungRecordError(
                f"a user function ran past max.poll.interval.ms ({self.poll_interval:.0f} s) on {where}: the "
                "group declared this worker's partitions lost; a fresh worker takes over"
            )
            _log.error("%s", self.failure)
            on_dead(self.failure)
        else:
            with self._lock:
                mark = self.book.unpin(key, offset)
            if mark is not None:
                _log.warning("%s returned before max.poll.interval.ms; its marker is cleared", where)
                try:
                    self._write([(key, mark)])
                except KafkaClientError as exc:
                    _log.error("could not clear the marker of %s: %s", where, exc)

    def close(self) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(5)
        self._producer.flush(self.timeout)
