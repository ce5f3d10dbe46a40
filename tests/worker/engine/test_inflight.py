"""Committable offsets when a record's units finish out of order (pure logic, no broker)."""

from __future__ import annotations

from cadenza.worker.engine.inflight import InFlight, Pending


def admit(inflight: InFlight, topic: str, partition: int, offset: int, units: int) -> Pending:
    pending: Pending = [offset, units]
    inflight.admitted(inflight.progress(topic, partition), offset, pending)
    return pending


def test_the_committable_offset_stops_at_the_first_record_with_units_left() -> None:
    inflight = InFlight()
    records = [admit(inflight, "t", 0, offset, 2) for offset in range(4)]  # two sub-topologies each
    for pending in (records[1], records[2], records[3]):
        pending[1] -= 2  # both units of offsets 1-3 ran before either unit of offset 0
    assert inflight.advanced() == {("t", 0): 0}
    records[0][1] -= 1
    assert inflight.advanced() == {}  # offset 0 still has a unit queued: nothing moves
    records[0][1] -= 1
    assert inflight.advanced() == {("t", 0): 4}
    assert inflight.unfinished() == 0


def test_records_without_units_do_not_hold_the_offset_back() -> None:
    inflight = InFlight()
    admit(inflight, "t", 0, 0, 0)  # dead-lettered at decode
    admit(inflight, "t", 0, 1, 0)
    assert inflight.advanced() == {("t", 0): 2}
    slow = admit(inflight, "t", 0, 2, 1)
    admit(inflight, "t", 0, 3, 0)  # done at once, but after a record still running
    assert inflight.advanced() == {}
    slow[1] -= 1
    assert inflight.advanced() == {("t", 0): 4}


def test_partitions_advance_independently_and_only_forward() -> None:
    inflight = InFlight()
    a = admit(inflight, "t", 0, 10, 1)
    b = admit(inflight, "t", 1, 5, 1)
    b[1] -= 1
    assert inflight.advanced() == {("t", 0): 10, ("t", 1): 6}
    assert inflight.advanced() == {}  # handed to a commit already
    a[1] -= 1
    assert inflight.advanced() == {("t", 0): 11}


def test_forgotten_partitions_are_gone() -> None:
    inflight = InFlight()
    admit(inflight, "t", 0, 0, 1)
    admit(inflight, "u", 0, 0, 1)
    inflight.forget([("t", 0)])
    assert set(inflight.partitions) == {("u", 0)}
    assert inflight.unfinished() == 1


def test_a_run_commits_up_to_its_first_unfinished_record_exactly_as_entries_per_record_would() -> None:
    """Offsets 3, 5, 6, 9 (gaps: compaction, transaction markers) and 7 dead-lettered at decode."""
    runs, single = InFlight(), InFlight()
    run: Pending = [3, 0]
    progress = runs.progress("t", 0)
    progress.queue.append(run)
    entries = []
    for offset in (3, 5, 6, 9):
        run.append(offset)
        run[1] += 1
        progress.fetched = offset + 1
        entries.append(admit(single, "t", 0, offset, 1))
    assert len(runs.partitions[("t", 0)]) == runs.unfinished() == single.unfinished() == 4
    for finished in range(4):  # the units of one operator-partition finish in offset order
        assert runs.advanced() == single.advanced()
        run[1] -= 1
        entries[finished][1] -= 1
    assert runs.advanced() == single.advanced() == {("t", 0): 10}
    assert runs.unfinished() == 0


def test_runs_and_records_of_one_partition_advance_in_offset_order() -> None:
    inflight = InFlight()
    progress = inflight.progress("t", 0)
    first: Pending = [0, 2, 0, 1]
    progress.queue.append(first)
    alone = admit(inflight, "t", 0, 2, 1)  # run alone by the quarantine guard, after the run
    second: Pending = [3, 2, 3, 4]
    progress.queue.append(second)
    progress.fetched = 5
    alone[1] -= 1
    second[1] -= 1
    assert inflight.advanced() == {("t", 0): 0}
    first[1] -= 1
    assert inflight.advanced() == {("t", 0): 1}
    assert inflight.unfinished() == 2
    first[1] -= 1
    assert inflight.advanced() == {("t", 0): 4}  # offset 3 ran; 4 has its unit left
    second[1] -= 1
    assert inflight.advanced() == {("t", 0): 5}
