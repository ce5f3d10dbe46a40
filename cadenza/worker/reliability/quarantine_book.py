"""Poison-pill quarantine, the rule and its bookkeeping: a record that was running at two deaths of its
worker is not run a third time.

A record can kill the process that runs it where no ``try`` helps: a segfault in a C extension, an
OOM kill, a hang past ``max.poll.interval.ms`` (the group then declares the partitions lost). Its
partition's next owner reads again from the committed offset, runs the same record and dies the same
way, forever. The rule: a record that was running when the worker died or was declared lost twice
in a row is dead-lettered the next time, with disposition ``quarantined``, and the pipeline goes on.

It is kept in Kafka (a worker may come back on another host), in the compacted control topic
``cadenza-quarantine``, as one *mark* per group and input partition (a
:class:`~cadenza.worker.reliability.quarantine_marks.Mark`):

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
  :class:`~cadenza.worker.reliability.hang_watch.HungRecordError`, so ``cadenza worker`` starts a
  fresh worker in place, which reads the mark and counts the death) and ``/healthz`` reports it dead
  meanwhile (the watchdog: :mod:`cadenza.worker.reliability.hang_watch`).

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

This module is that rule alone, as a pure state machine (:class:`QuarantineBook`, and
:func:`slot_pins` for crash slots): it decides which records run how and which marks to write, and
touches neither Kafka nor a clock, so that it can be played exhaustively against a brute-force model
of deaths without a broker. :class:`~cadenza.worker.reliability.quarantine.QuarantineGuard` is its
Kafka side; the marks and their codec are :mod:`cadenza.worker.reliability.quarantine_marks`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum

from cadenza.worker.reliability.crash_slot import SlotState
from cadenza.worker.reliability.quarantine_marks import Key, Mark

__all__ = ["CHUNKED_ABOVE", "LEASE_SECONDS", "MIN_LEASE", "QuarantineBook", "Route", "slot_pins"]

#: Records a lease covers at least (see the module docstring).
MIN_LEASE = 100
#: Seconds of a partition's recent fetch rate a lease covers: about one extension per second.
LEASE_SECONDS = 1.0
#: Suspect ranges up to this many records are replayed one record per marker; longer ones in chunks
#: of ``ceil(sqrt(range))`` records per marker (see the module docstring).
CHUNKED_ABOVE = 128


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
