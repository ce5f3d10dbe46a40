"""The quarantine's marks: their codec round-trips, reads marks written by older workers, and reads
anything that is not a mark as none (a bad control record must never stop a worker)."""

from __future__ import annotations

import json

from cadenza.worker.reliability.quarantine_marks import Mark


def test_a_mark_round_trips_and_garbage_is_no_mark() -> None:
    mark = Mark(120, False, 7, 1, "w1")
    assert Mark.decode(mark.encode()) == mark
    chunk = Mark(120, False, 7, 0, "w1", span=10)
    assert Mark.decode(chunk.encode()) == chunk
    for span in (0, "2", True):
        assert (
            Mark.decode(chunk.encode().replace(b'"span": 10', json.dumps({"span": span})[1:-1].encode()))
            is None
        )
    assert Mark.decode(None) is None
    assert Mark.decode(b"{") is None
    assert Mark.decode(b'{"high": "1", "clean": false, "running": null, "deaths": 0}') is None


def test_marks_written_before_crash_slots_still_read_and_a_bad_exact_flag_is_no_mark() -> None:
    assert Mark.decode(b'{"high": 5, "clean": false, "running": 2, "deaths": 1, "owner": "w"}') == Mark(
        5, False, 2, 1, "w", exact=False
    )
    exact = Mark(5, False, 2, 1, "w", exact=True)
    assert Mark.decode(exact.encode()) == exact
    assert Mark.decode(b'{"high": 5, "clean": false, "running": 2, "deaths": 1, "exact": 1}') is None
    assert Mark.decode(b"[1, 2]") is None
