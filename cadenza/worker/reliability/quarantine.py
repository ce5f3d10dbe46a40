"""The Kafka side of the poison-pill quarantine: :class:`QuarantineGuard`, which the worker holds.

The rule (a record running at two deaths of its worker is dead-lettered, not run a third time), the
leases, the serial replay behind markers and the exact pins of crash slots are described, and decided,
in :mod:`cadenza.worker.reliability.quarantine_book`; the marks are
:mod:`cadenza.worker.reliability.quarantine_marks`. The guard does what needs the broker or the
worker: it reads the group's marks from the control topic at each assignment (and, before the worker
joins, turns dead workers' crash slots into exact marks), produces and flushes the marks the book asks
for before the records they cover run, renews leases early without waiting (an acknowledgement is
applied at the next extend), runs suspect records alone, dead-letters quarantined ones, and runs the
hang watchdog (:mod:`cadenza.worker.reliability.hang_watch`) on a thread of its own.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from types import CodeType
from typing import Protocol

from confluent_kafka import KafkaError, Message, TopicPartition

from cadenza.infra.kafka.clients import DeliveryReport, flush_or_raise, make_consumer, make_producer
from cadenza.infra.kafka.errors import KafkaClientError
from cadenza.infra.kafka.offsets import end_offsets
from cadenza.settings import KafkaSettings
from cadenza.worker.reliability.crash_slot import CrashSlot, SlotState
from cadenza.worker.reliability.hang_watch import HangEvent, HangTracker, HungRecordError, running_unit
from cadenza.worker.reliability.quarantine_book import MIN_LEASE, QuarantineBook, Route, slot_pins
from cadenza.worker.reliability.quarantine_marks import QUARANTINE_TOPIC, Key, Mark


class Admitting(Protocol):
    """What the guard needs of the engine (:class:`~cadenza.worker.engine.engine.Engine`): admit a
    batch as usual, run one record alone, or dead-letter one without running it."""

    def admit(self, messages: list[Message]) -> None: ...

    def run_alone(self, message: Message, topic: str, partition: int, offset: int) -> None: ...

    def dead_letter_alone(
        self, message: Message, topic: str, partition: int, offset: int, why: str
    ) -> None: ...


__all__ = ["QuarantineGuard"]

_log = logging.getLogger("cadenza.worker")


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
