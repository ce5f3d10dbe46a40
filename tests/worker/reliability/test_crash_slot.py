"""The crash slot file (no broker): what a process that dies by ``os._exit`` leaves in it, how slots are
shared out by lock, and how stale or damaged contents are ignored with a warning."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from cadenza.worker.engine.running import IDLE, UNKNOWN
from cadenza.worker.reliability.crash_slot import (
    HEADER,
    MAGIC,
    PAGE,
    CrashSlot,
    SlotState,
    default_crash_dir,
    group_directory,
    parse_slot,
)

GROUP = "cadenza-orders/2"  # a name that is not a valid file name as it is

DIE_WHILE_RUNNING = """
import os, sys
from pathlib import Path
from cadenza.worker.engine.running import IDLE
from cadenza.worker.reliability.crash_slot import CrashSlot

slot = CrashSlot.take(Path(sys.argv[1]), sys.argv[2], "dead-owner")
slot.settle()
slot.assign([("orders", 0), ("orders", 3)])
words = slot.words
words[1] = slot.tags[("orders", 3)]  # the executor's stores: the partition once per quantum, then
for offset in range(1000, 1042):     # one store before a record runs, one after
    words[0] = offset
    words[0] = IDLE
words[0] = 1042
os._exit(137)  # no flush, no close: only the kernel keeps what was stored
"""


def _take(crash_dir: Path, owner: str = "me") -> CrashSlot:
    slot = CrashSlot.take(crash_dir, GROUP, owner)
    assert slot is not None
    return slot


def test_a_process_that_dies_by_os_exit_leaves_the_record_it_was_running(tmp_path: Path) -> None:
    script = tmp_path / "die.py"
    script.write_text(DIE_WHILE_RUNNING)
    done = subprocess.run([sys.executable, str(script), str(tmp_path), GROUP], check=False, timeout=60)
    assert done.returncode == 137
    slot = _take(tmp_path)
    assert slot.dead == [
        SlotState(GROUP, "dead-owner", (("orders", 0), ("orders", 3)), (("orders", 3), 1042), None)
    ]
    # Settled, the slot is this worker's: idle, empty table, this owner; nothing dead is read again.
    slot.settle()
    slot.close(clean=False)
    again = _take(tmp_path, "next")
    assert again.dead == [SlotState(GROUP, "me", (), None, None)]
    again.close(clean=True)


def test_each_live_worker_of_a_group_holds_its_own_slot_and_a_clean_stop_removes_it(tmp_path: Path) -> None:
    first, second = _take(tmp_path, "a"), _take(tmp_path, "b")
    assert first.path != second.path and first.path.parent == second.path.parent
    assert first.path.parent == group_directory(tmp_path, GROUP)
    first.settle()
    second.settle()
    first.assign([("t", 0)])
    first.running(("t", 0), 7)
    first.hung(("t", 0), 7)
    first.close(clean=False)  # a failed worker: its slot stays, unlocked, for the next one
    second.close(clean=True)  # a clean stop: nothing in it matters
    assert not second.path.exists() and first.path.exists()
    third = _take(tmp_path, "c")
    assert third.path == first.path
    assert [(s.owner, s.running, s.hung) for s in third.dead] == [("a", (("t", 0), 7), (("t", 0), 7))]
    third.settle()
    third.close(clean=True)
    assert not group_directory(tmp_path, GROUP).exists()


def test_a_starting_worker_reads_every_free_slot_and_keeps_one(tmp_path: Path) -> None:
    left = [_take(tmp_path, f"dead-{n}") for n in range(3)]
    for n, slot in enumerate(left):
        slot.settle()
        slot.assign([("t", n)])
        slot.running(("t", n), 100 + n)
    live = left.pop(1)  # slot-1 still belongs to a live worker
    for slot in left:
        slot.close(clean=False)
    starting = _take(tmp_path, "new")
    assert sorted((s.owner, s.running) for s in starting.dead) == [
        ("dead-0", (("t", 0), 100)),
        ("dead-2", (("t", 2), 102)),
    ]
    starting.settle()  # the spare dead slot is gone, the live one untouched
    assert sorted(p.name for p in starting.path.parent.iterdir()) == ["slot-0", "slot-1"]
    assert starting.path.name == "slot-0"
    live.close(clean=True)
    starting.close(clean=True)


def _header(
    running: int = IDLE, tag: int = UNKNOWN, *, version: int = 1, body: bytes = b"", crc: int | None = None
) -> bytes:
    checksum = zlib.crc32(body) if crc is None else crc
    page = HEADER.pack(MAGIC, version, 0, running, tag, IDLE, UNKNOWN, len(body), checksum).ljust(PAGE, b"\0")
    return page + body


def _body(group: str = GROUP, partitions: list[list[object]] | None = None) -> bytes:
    return json.dumps({"group": group, "owner": "x", "partitions": partitions or [["t", 0]]}).encode()


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"CDZ", "truncated"),
        (b"x" * HEADER.size, "not a cadenza crash slot"),
        (_header(version=9, body=_body()), "version 9"),
        (_header(body=_body(), crc=1), "damaged"),
        (_header(body=_body())[:-3], "damaged"),
        (_header(body=_body(group="other")), "belongs to group 'other'"),
        (_header(running=1, tag=5, body=_body()), "table entry 4"),
        (_header(body=b'{"owner": 1}'), "does not decode"),
    ],
)
def test_stale_or_damaged_contents_are_refused_with_the_reason(data: bytes, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        parse_slot(data, GROUP)


def test_a_damaged_slot_is_ignored_with_a_warning_and_taken_over(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    directory = group_directory(tmp_path, GROUP)
    directory.mkdir(parents=True)
    (directory / "slot-0").write_bytes(_header(body=_body(group="other")))
    with caplog.at_level(logging.WARNING, logger="cadenza.worker"):
        slot = _take(tmp_path)
    assert slot.dead == []
    assert "is ignored: it belongs to group 'other'" in caplog.text
    slot.settle()  # and it is this worker's from now on
    slot.close(clean=False)
    again = _take(tmp_path)
    assert [s.owner for s in again.dead] == ["me"]
    again.close(clean=True)


def test_a_record_the_slot_cannot_name_is_unknown_not_a_guess() -> None:
    state = parse_slot(_header(running=5, tag=UNKNOWN, body=_body()), GROUP)
    assert state is not None and state.unknown and state.culprit is None
    named = parse_slot(_header(running=5, tag=1, body=_body()), GROUP)
    assert named is not None and not named.unknown and named.culprit == (("t", 0), 5)
    assert parse_slot(b"", GROUP) is None  # a new file


def test_the_default_directory_follows_the_state_dir(tmp_path: Path) -> None:
    assert default_crash_dir(tmp_path) == tmp_path / "crash"
    assert default_crash_dir(None).parts[-2:] == ("cadenza", "crash")


def test_a_slot_never_settled_keeps_the_dead_state_even_through_a_clean_close(tmp_path: Path) -> None:
    dead = _take(tmp_path, "dead")
    dead.settle()
    dead.assign([("t", 0)])
    dead.running(("t", 0), 3)
    dead.close(clean=False)
    failed = _take(tmp_path, "failed-start")  # its start failed before the pins were written
    assert [s.running for s in failed.dead] == [(("t", 0), 3)]
    failed.close(clean=True)
    assert [s.running for s in _take(tmp_path, "next").dead] == [(("t", 0), 3)]


def test_a_slot_that_cannot_be_written_is_given_up_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    slot = _take(tmp_path)

    def full(fd: int, length: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("cadenza.worker.reliability.crash_slot.os.ftruncate", full)
    with caplog.at_level(logging.WARNING, logger="cadenza.worker"):
        assert slot.settle() is False
    assert "cannot be written (" in caplog.text and "No space left on device" in caplog.text
    slot.running(("t", 0), 5)  # the worker goes on: stores land in a private buffer
    monkeypatch.undo()
    assert _take(tmp_path).path == slot.path  # released: the next worker can take it
