"""The quarantine state machine (no broker): leases, the serial mode after an unclean death, pinning
(the watchdog's marker too), the two-deaths rule, clean releases, ranges cut at the partition's end, and
the exact pins a dead worker's crash slot makes.

A brute-force model of the rule is played against the book with hypothesis: a partition of records,
some of which kill every worker that runs them; owners run from the committed offset, die or release
cleanly; the model says which record must be quarantined and when.
"""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from cadenza.worker.reliability.crash_slot import SlotState
from cadenza.worker.reliability.quarantine_book import (
    CHUNKED_ABOVE,
    LEASE_SECONDS,
    QuarantineBook,
    Route,
    slot_pins,
)
from cadenza.worker.reliability.quarantine_marks import Mark

KEY = ("in", 0)


def test_a_fresh_partition_runs_normally_behind_a_lease_extended_before_its_records_run() -> None:
    book = QuarantineBook("w", min_lease=10)
    book.assigned(KEY, None)
    assert not book.suspect
    assert book.route(KEY, 0) == (Route.RUN, None)
    # Five records fetched: the lease (none yet) must cover them before they run.
    [(key, mark)] = book.leases([(KEY, 5)], now=1.0)
    assert key == KEY and mark == Mark(15, False, None, 0, "w")  # slow: the minimum lease
    assert book.leases([(KEY, 15)], now=1.5) == []  # still covered: nothing to write
    # 995 records in half a second: the lease covers about a second of that rate.
    [(_, mark)] = book.leases([(KEY, 1000)], now=1.5)
    assert mark.high == 1000 + math.ceil(995 / 0.5 * LEASE_SECONDS)
    assert book.released(KEY) == Mark(mark.high, True, None, 0, "w")


def test_an_unpinned_death_runs_its_range_alone_then_normally() -> None:
    book = QuarantineBook("w2", min_lease=10)
    book.assigned(KEY, Mark(15, False, None, 0, "w1"))
    assert book.suspect
    route, mark = book.route(KEY, 3)
    assert route is Route.ALONE and mark == Mark(15, False, 3, 0, "w2")
    route, mark = book.route(KEY, 14)
    assert route is Route.ALONE and mark is not None and mark.running == 14
    route, mark = book.route(KEY, 15)  # past the range: the marker is cleared before it runs
    assert route is Route.RUN and mark == Mark(15, False, None, 0, "w2")
    assert not book.suspect


def _replay(book: QuarantineBook, start: int, end: int) -> list[Mark]:
    """Route ``[start, end)`` through ``book``: every record alone, the markers written before them."""
    marks: list[Mark] = []
    for offset in range(start, end):
        route, mark = book.route(KEY, offset)
        assert route is Route.ALONE
        if mark is not None:
            marks.append(mark)
    return marks


def test_a_long_range_is_replayed_in_chunks_of_its_square_root_and_a_chunk_death_narrows_to_it() -> None:
    book = QuarantineBook("w2")
    book.assigned(KEY, Mark(10_000, False, None, 0, "w1"))
    marks = _replay(book, 0, 10_000)
    # 100 flushes instead of 10,000: one marker per chunk of 100, naming its first record.
    assert marks == [Mark(10_000, False, start, 0, "w2", span=100) for start in range(0, 10_000, 100)]
    assert book.route(KEY, 10_000) == (Route.RUN, Mark(10_000, False, None, 0, "w2"))
    # Its owner died in the chunk 300-399: the next one runs that chunk one record per marker (no
    # deaths carried: which record ran is not known) and the rest in chunks, cut at the pinned chunk.
    book = QuarantineBook("w3")
    book.assigned(KEY, Mark(10_000, False, 300, 0, "w2", span=100))
    marks = _replay(book, 0, 10_000)
    assert [(m.running, m.span, m.deaths) for m in marks] == [
        *((start, 100, 0) for start in (0, 100, 200)),
        *((offset, 1, 0) for offset in range(300, 400)),
        *((start, 100, 0) for start in range(400, 10_000, 100)),
    ]
    # It died at 342: that record carries one death; the rest of the range is chunked as before.
    book = QuarantineBook("w4")
    book.assigned(KEY, Mark(10_000, False, 342, 0, "w3"))
    marks = _replay(book, 0, 343)
    assert [(m.running, m.span, m.deaths) for m in marks] == [
        *((start, 100, 0) for start in (0, 100, 200)),
        (300, 42, 0),
        (342, 1, 1),
    ]


def test_a_short_range_is_replayed_one_record_per_marker_and_a_hang_in_a_chunk_is_narrowed() -> None:
    book = QuarantineBook("w2")
    book.assigned(KEY, Mark(CHUNKED_ABOVE, False, None, 0, "w1"))
    marks = _replay(book, 0, CHUNKED_ABOVE)
    assert [(m.running, m.span) for m in marks] == [(offset, 1) for offset in range(CHUNKED_ABOVE)]
    assert book.pin(KEY, CHUNKED_ABOVE - 1) is None  # its one-record marker is durable already
    # In a chunk, the watchdog's marker names the hanging record alone.
    book = QuarantineBook("w2", chunked_above=4)
    book.assigned(KEY, Mark(25, False, None, 0, "w1"))
    assert _replay(book, 0, 7) == [Mark(25, False, 0, 0, "w2", span=5), Mark(25, False, 5, 0, "w2", span=5)]
    assert book.pin(KEY, 6) == Mark(25, False, 6, 0, "w2")
    assert book.unpin(KEY, 6) is None  # the next chunk's marker replaces it


def test_two_pinned_deaths_quarantine_and_one_death_then_a_pass_does_not() -> None:
    book = QuarantineBook("w3", min_lease=10)
    # Second death, pinned on offset 4 (the marker carried no earlier deaths).
    book.assigned(KEY, Mark(15, False, 4, 0, "w2"))
    assert book.route(KEY, 4) == (Route.ALONE, Mark(15, False, 4, 1, "w3"))
    # It dies again: the next owner sees deaths=1 on the same record -> 2: quarantined.
    book = QuarantineBook("w4", min_lease=10)
    book.assigned(KEY, Mark(15, False, 4, 1, "w3"))
    assert book.route(KEY, 3)[0] is Route.ALONE
    assert book.route(KEY, 4) == (Route.QUARANTINE, None)
    book.quarantined(KEY, 4)
    route, mark = book.route(KEY, 5)
    assert route is Route.ALONE and mark is not None and mark.deaths == 0
    # A record that died once and passes on its retry: the next marker carries no deaths for it.
    book = QuarantineBook("w5", min_lease=10)
    book.assigned(KEY, Mark(15, False, 4, 0, "w4"))
    assert book.route(KEY, 4)[1] == Mark(15, False, 4, 1, "w5")
    assert book.route(KEY, 5)[1] == Mark(15, False, 5, 0, "w5")


def test_a_clean_release_clears_suspicion_and_a_lost_partition_writes_nothing() -> None:
    book = QuarantineBook("w", min_lease=10)
    book.assigned(KEY, Mark(15, True, 4, 1, "old"))  # released cleanly: no suspicion, whatever it says
    assert not book.suspect
    book.forget(KEY)
    assert book.released(KEY) is None


def test_the_watchdog_pin_is_kept_by_leases_cleared_on_return_and_frozen_after_a_death() -> None:
    book = QuarantineBook("w", min_lease=10)
    book.assigned(KEY, None)
    book.leases([(KEY, 3)], now=10.0)
    assert book.pin(KEY, 2) == Mark(13, False, 2, 0, "w")
    [(_, mark)] = book.leases([(KEY, 20)], now=20.0)
    assert mark.running == 2  # a lease written meanwhile keeps the marker
    assert book.unpin(KEY, 2) == Mark(mark.high, False, None, 0, "w")
    assert book.unpin(KEY, 2) is None
    book.pin(KEY, 5)
    book.frozen = True  # past the poll interval: this worker is being replaced
    assert book.leases([(KEY, 1000)]) == []
    assert book.unpin(KEY, 5) is None
    assert book.released(KEY) is None
    # In the serial mode the marker is already durable: the watchdog writes nothing.
    serial = QuarantineBook("w", min_lease=10)
    serial.assigned(KEY, Mark(15, False, None, 0, "x"))
    assert serial.pin(KEY, 3) is None


def test_a_range_is_cut_at_the_partitions_end_before_its_chunks_are_sized() -> None:
    # A lease of a fast fetch over 3,000 records promised 118,774: only the 3,000 can have killed it.
    book = QuarantineBook("w2")
    book.assigned(KEY, Mark(118_774, False, None, 0, "w1"))
    assert book.bound(KEY, 3_000) == 118_774
    assert book.bound(KEY, 3_500) is None, "a later, higher end does not widen it"
    marks = _replay(book, 0, 3_000)
    assert [(m.running, m.span) for m in marks] == [
        (start, min(55, 3_000 - start)) for start in range(0, 3_000, 55)
    ]
    assert all(m.high == 118_774 for m in marks), "the lease it took over is still promised"
    assert book.route(KEY, 3_000) == (Route.RUN, Mark(118_774, False, None, 0, "w2"))
    # An end past the range changes nothing; a pinned record is never cut off.
    book = QuarantineBook("w2")
    book.assigned(KEY, Mark(500, False, None, 0, "w1"))
    assert book.bound(KEY, 900) is None and book.parts[KEY].suspect_below == 500
    book = QuarantineBook("w3")
    book.assigned(KEY, Mark(10_000, False, 7_000, 1, "w2"))
    assert book.bound(KEY, 5_000) == 10_000 and book.parts[KEY].suspect_below == 7_001
    # Nothing suspect, nothing to cut.
    book = QuarantineBook("w2")
    book.assigned(KEY, Mark(500, True, None, 0, "w1"))
    assert book.bound(KEY, 10) is None and book.route(KEY, 0) == (Route.RUN, None)


# -- the rule against a brute force -------------------------------------------------------------------


def _simulate(
    records: int, poison: set[int], max_lives: int, chunked_above: int
) -> tuple[list[int], list[int], list[int]]:
    """Owners one after another; each runs from the committed offset through the book, dying on a
    poison record (records after the range run normally; a death there is unpinned), with no crash
    slot ever found (see :func:`_simulate_with_slots`). Returns the quarantined offsets, the offset
    running at each death and the offsets that ran to completion, in order. (The simulated clock
    makes every lease about 1,000 records: ranges are chunked unless ``chunked_above`` is larger.)"""
    return _simulate_with_slots(
        records, poison, set(), [False] * max_lives, max_lives=max_lives, chunked_above=chunked_above
    )


@given(
    records=st.integers(min_value=1, max_value=30),
    poison=st.sets(st.integers(min_value=0, max_value=29), max_size=4),
    chunked=st.booleans(),
)
@settings(max_examples=200, deadline=None)
def test_every_poison_record_is_quarantined_after_three_deaths_at_most_four_in_a_chunked_range(
    records: int, poison: set[int], chunked: bool
) -> None:
    poison = {p for p in poison if p < records}
    most = 4 if chunked else 3
    quarantined, deaths, done = _simulate(
        records, poison, max_lives=most * len(poison) + 2, chunked_above=CHUNKED_ABOVE if chunked else 10**9
    )
    # Brute force: exactly the poison records are quarantined, each after at most 3 deaths (4 when
    # its range was replayed in chunks), and every other record runs (the pipeline goes on).
    assert sorted(quarantined) == sorted(poison)
    for offset in poison:
        assert deaths.count(offset) <= most
    assert len(deaths) == sum(deaths.count(offset) for offset in poison)  # nobody else died
    assert sorted(set(done)) == sorted(set(range(records)) - poison)


# -- exact pins from a dead worker's crash slot --------------------------------------------------------


def _slot(owner: str, running: int | None, *, hung: int | None = None, unknown: bool = False) -> SlotState:
    other = ("in", 1)
    return SlotState(
        "g",
        owner,
        (other, KEY),
        None if running is None else (KEY, running),
        None if hung is None else (KEY, hung),
        unknown,
    )


def test_a_crash_slot_pins_the_running_record_of_a_partition_its_dead_owner_still_holds() -> None:
    other = ("in", 1)
    marks: dict[tuple[str, int], Mark | None] = {
        KEY: Mark(120, False, None, 0, "dead"),
        other: Mark(50, False, None, 0, "dead"),
    }
    pins = dict(slot_pins(_slot("dead", 104), marks))
    # Exact: the record that ran, no deaths yet; the other partition ran nothing: nothing suspect there.
    assert pins == {
        KEY: Mark(120, False, 104, 0, "dead", exact=True),
        other: Mark(50, False, None, 0, "dead", exact=True),
    }
    # Idempotent: applied once, the same slot changes nothing more.
    assert slot_pins(_slot("dead", 104), pins) == []
    # The serial path's durable marker named that record: its deaths are kept (not counted twice).
    marked = {KEY: Mark(120, False, 104, 1, "dead")}
    assert slot_pins(_slot("dead", 104), marked) == [(KEY, Mark(120, False, 104, 1, "dead", exact=True))]
    # The marker named a record that had passed (death while the next marker was being flushed): the
    # slot knows better, and that record keeps no death.
    assert slot_pins(_slot("dead", 105), marked) == [(KEY, Mark(120, False, 105, 0, "dead", exact=True))]
    assert slot_pins(_slot("dead", None), marked) == [(KEY, Mark(120, False, None, 0, "dead", exact=True))]
    # A hang the group declared dead wins over what ran after it.
    assert slot_pins(_slot("dead", 110, hung=104), marked)[0][1].running == 104


def test_a_crash_slot_changes_nothing_once_someone_else_held_the_partition_or_when_it_cannot_tell() -> None:
    running = _slot("dead", 104)
    assert slot_pins(running, {KEY: Mark(120, True, None, 0, "dead")}) == []  # released cleanly
    assert slot_pins(running, {KEY: Mark(300, False, None, 0, "next")}) == []  # another ran it since
    assert slot_pins(running, {KEY: None}) == []  # never marked: never handed to user code
    assert slot_pins(running, {KEY: Mark(100, False, None, 0, "dead")}) == []  # beyond the lease: garbage
    assert slot_pins(_slot("dead", None, unknown=True), {KEY: Mark(120, False, None, 0, "dead")}) == []


def test_an_exact_pin_makes_only_its_record_suspect_and_the_new_owner_claims_the_partition() -> None:
    book = QuarantineBook("w2", min_lease=10)
    book.assigned(KEY, Mark(120, False, 104, 0, "w1", exact=True))
    assert book.suspect
    # Records before the pinned one were not running at the death: alone (to keep offset order), no
    # marker, but the first writes this worker's claim (not exact: its own death must not read as w1's).
    assert book.route(KEY, 100) == (Route.ALONE, Mark(120, False, None, 0, "w2"))
    assert book.route(KEY, 101) == (Route.ALONE, None)
    assert book.route(KEY, 104) == (Route.ALONE, Mark(120, False, 104, 1, "w2"))
    route, mark = book.route(KEY, 105)  # the rest of the lease runs as usual
    assert route is Route.RUN and mark == Mark(120, False, None, 0, "w2")
    assert not book.parts[KEY].suspect_below  # suspicion over
    # Its second death: quarantined at once, nothing else runs alone.
    book = QuarantineBook("w3", min_lease=10)
    book.assigned(KEY, Mark(120, False, 104, 1, "w2", exact=True))
    assert book.route(KEY, 104) == (Route.QUARANTINE, None)
    book.quarantined(KEY, 104)
    assert book.route(KEY, 105) == (Route.RUN, Mark(120, False, None, 0, "w3"))


def test_an_exact_mark_of_an_idle_death_runs_everything_as_usual_behind_a_claim() -> None:
    book = QuarantineBook("w2", min_lease=10)
    book.assigned(KEY, Mark(120, False, None, 0, "w1", exact=True))
    assert not book.suspect
    assert book.route(KEY, 100) == (Route.RUN, None)
    # Within the dead owner's lease, still a mark of this worker's before anything runs.
    assert book.leases([(KEY, 101)], now=1.0) == [(KEY, Mark(120, False, None, 0, "w2"))]
    assert book.leases([(KEY, 102)], now=1.1) == []


def _simulate_with_slots(
    records: int,
    poison: set[int],
    kills: set[int],
    slot_kept: list[bool],
    *,
    max_lives: int,
    ack_delay: int = 0,
    chunked_above: int = CHUNKED_ABOVE,
    end_at: str | None = None,
) -> tuple[list[int], list[int], list[int]]:
    """As :func:`_simulate`, with one-off kills (a random SIGKILL landing while that record runs) and,
    per death, whether the dead worker's crash slot is found by the next start (``slot_kept``; beyond
    its end: kept). Early lease renewals are acknowledged ``ack_delay`` records after they are written
    and lost if the worker dies first (with every mark written after them: the log keeps a prefix).
    Asserts that a record runs in the normal path only below the high of the last durable mark.
    ``end_at``: each owner cuts its suspect range at the partition's end (``"records"``: every record
    exists from the start; ``"reached"``: only those some owner fetched, the tightest end a real one
    can read) or not at all (``None``).
    Returns the quarantined offsets, the offset running at each death, the completed."""
    mark: Mark | None = None
    committed = 0
    quarantined: list[int] = []
    done: list[int] = []
    deaths: list[int] = []
    killed: set[int] = set()
    reached = 0  # records fetched by any owner so far
    for life in range(max_lives):
        owner = f"w{life}"
        book = QuarantineBook(owner, min_lease=3, chunked_above=chunked_above)
        book.assigned(KEY, mark, now=float(life * 100))
        if end_at is not None:
            book.bound(KEY, records if end_at == "records" else max(reached, committed + 1))
        log: list[Mark] = []  # this owner's marks in the order written; the first ``durable`` are
        durable = 0
        renewals: list[tuple[int, int, int]] = []  # (acknowledged at offset, log index, high)
        died = False
        offset = committed

        while offset < records:
            for due, index, high in [r for r in renewals if r[0] <= offset]:
                renewals.remove((due, index, high))
                durable = max(durable, index + 1)
                book.acknowledged(KEY, high, book.parts.get(KEY))
            reached = max(reached, offset + 1)
            route, write = book.route(KEY, offset)
            if write is not None:
                log.append(write)
                durable = len(log)  # written and flushed before the record runs
            if route is Route.RUN:
                now = float(life * 100 + offset)
                for _, lease in book.leases([(KEY, offset + 1)], now=now):
                    log.append(lease)
                    durable = len(log)
                for _, renewal, high in book.renew([(KEY, offset + 1)], now=now):
                    log.append(renewal)
                    renewals.append((offset + ack_delay, len(log) - 1, high))
                durable_mark = log[durable - 1] if durable else mark
                assert durable_mark is not None and offset < durable_mark.high, "ran past the durable lease"
            if route is Route.QUARANTINE:
                book.quarantined(KEY, offset)
                quarantined.append(offset)
            elif offset in poison or (offset in kills and offset not in killed):
                killed.add(offset)
                died = True
                break
            else:
                done.append(offset)
            offset += 1
            committed = offset  # commits right after, as the worker may
        if not died:
            break
        kept = slot_kept[len(deaths)] if len(deaths) < len(slot_kept) else True
        deaths.append(offset)
        last = log[durable - 1] if durable else mark
        if kept and last is not None:  # the restart on the same host, before it joins
            state = SlotState("g", owner, (KEY,), (KEY, offset), None)
            for _, pin in slot_pins(state, {KEY: last}):
                last = pin
        mark = last
    return quarantined, deaths, done


@given(
    records=st.integers(min_value=1, max_value=30),
    poison=st.sets(st.integers(min_value=0, max_value=29), max_size=4),
    kills=st.sets(st.integers(min_value=0, max_value=29), max_size=4),
    ack_delay=st.integers(min_value=0, max_value=4),
)
@settings(max_examples=200, deadline=None)
def test_with_crash_slots_a_poison_record_dies_exactly_twice_and_a_one_off_kill_quarantines_nothing(
    records: int, poison: set[int], kills: set[int], ack_delay: int
) -> None:
    poison = {p for p in poison if p < records}
    kills = {k for k in kills if k < records} - poison
    quarantined, deaths, done = _simulate_with_slots(
        records, poison, kills, [], max_lives=2 * len(poison) + len(kills) + 2, ack_delay=ack_delay
    )
    assert sorted(quarantined) == sorted(poison)
    for offset in poison:
        assert deaths.count(offset) == 2
    assert sorted(deaths) == sorted([*poison, *poison, *kills])  # each kill is one death, pinned
    assert sorted(set(done)) == sorted(set(range(records)) - poison)


@given(
    records=st.integers(min_value=1, max_value=30),
    poison=st.sets(st.integers(min_value=0, max_value=29), max_size=3),
    kills=st.sets(st.integers(min_value=0, max_value=29), max_size=3),
    slot_kept=st.lists(st.booleans(), max_size=20),
    ack_delay=st.integers(min_value=0, max_value=4),
    chunked=st.booleans(),
    end_at=st.sampled_from([None, "records", "reached"]),
)
@settings(max_examples=300, deadline=None)
def test_without_some_crash_slots_a_poison_record_dies_three_times_at_most_four_if_chunked(
    *,
    records: int,
    poison: set[int],
    kills: set[int],
    slot_kept: list[bool],
    ack_delay: int,
    chunked: bool,
    end_at: str | None,
) -> None:
    poison = {p for p in poison if p < records}
    kills = {k for k in kills if k < records} - poison
    most = 4 if chunked else 3
    quarantined, deaths, done = _simulate_with_slots(
        records,
        poison,
        kills,
        slot_kept,
        max_lives=most * len(poison) + len(kills) + 2,
        ack_delay=ack_delay,
        # Ranges cut at the end hold at most 30 records: chunked from 5 on, so that chunks still run.
        chunked_above=(4 if end_at else CHUNKED_ABOVE) if chunked else 10**9,
        end_at=end_at,
    )
    assert sorted(quarantined) == sorted(poison)
    for offset in poison:
        assert deaths.count(offset) <= most
    assert sorted(set(done)) == sorted(set(range(records)) - poison)


def test_a_lease_is_renewed_early_without_waiting_and_counted_on_only_once_acknowledged() -> None:
    book = QuarantineBook("w", min_lease=10)
    part = book.assigned(KEY, None)
    # Records trickle in (one a second or so): every lease is the minimum, 10 records.
    [(_, first)] = book.leases([(KEY, 2)], now=10.0)
    assert first.high == 12  # the first lease: written and waited for
    assert book.renew([(KEY, 7)], now=20.0) == []  # not half used yet
    [(_, renewal, high)] = book.renew([(KEY, 8)], now=30.0)
    assert high == renewal.high == 18
    assert book.renew([(KEY, 9)], now=40.0) == []  # one renewal in flight at a time
    assert book.leases([(KEY, 12)], now=50.0) == []  # the acknowledged lease still covers 12
    # Fetched past the acknowledged lease before the renewal is acknowledged: wait for a mark, which
    # promises no less than the renewal already written.
    [(_, waited)] = book.leases([(KEY, 13)], now=60.0)
    assert waited.high == 23 and book.parts[KEY].lease == 23
    book.acknowledged(KEY, 10_000, object())  # another generation's partition: ignored
    book.acknowledged(KEY, high, part)  # late, and below the waited lease: changes nothing
    assert book.parts[KEY].lease == 23
    [(_, again, high)] = book.renew([(KEY, 19)], now=70.0)  # half of the waited lease used
    assert high == again.high == 29
    book.acknowledged(KEY, high, part)
    assert book.parts[KEY].lease == 29
    assert book.released(KEY) == Mark(29, True, None, 0, "w")
