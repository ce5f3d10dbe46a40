"""The crash slot: which record a worker process is running, kept where the process's death cannot erase it.

A record that kills its worker (a segfault in a C extension, an OOM kill, ``os._exit``) leaves nothing
behind in Kafka that says which record it was, unless a marker was flushed before it ran, and a flush
per record is far too slow for the normal path (see :mod:`cadenza.worker.reliability.quarantine_book`).
A file mapped
with ``MAP_SHARED`` is the cheap alternative: a store into the mapping lands in the kernel's page
cache at once, with no system call, and the kernel keeps it when the process dies, however it dies.
So the worker stores, before each unit runs, a word naming its partition and offset, and zero after;
when a worker of the same group starts again on the same host (the supervisor's in-place restart,
a container restarted by its restart policy, a test restarting ``cadenza worker``), it reads the
slot its dead predecessor left and turns it into an exact pin in Kafka before it joins the group.

**Where**: one directory per group under ``crash_dir`` (``--crash-dir``); each worker process of the
group on the host takes the first slot file it can lock (``flock``, held for the process's life).
A file whose lock is free belonged to a process that is gone, so what it holds is a dead worker's
last word. The directory must survive what the worker does not: a container's own file system
survives a restart of the container, a Kubernetes pod needs an ``emptyDir`` (or another volume);
a worker that comes back elsewhere finds no slot and the Kafka marks alone decide (the range rule).

**Layout** (little-endian): the first page holds the magic, the version, four 8-byte words, and the
length and CRC-32 of the body; the body, from the second page, is JSON: the group, the owner (the
``owner`` of the worker's Kafka marks) and the partition table, index -> (topic, partition),
rewritten on assignment. The words are the running record's offset (:data:`IDLE`, -1, when none
runs) and its partition (table index + 1; :data:`UNKNOWN`, 0: a partition the slot cannot name),
then the same pair for the record the hang watchdog declared dead. Each is one aligned 8-byte store,
which a death cannot tear, and they are stored in an order that never shows a mixed pair: the
partition word changes only while the offset word is idle (once per quantum in the executor), so a
record costs two plain stores, of its offset and of IDLE, with no arithmetic. While a fetched batch is
decoded and admitted (codecs and policies are user code too) the slot says "running, unknown": a
death there names no record, and the Kafka marks' range rule decides, as without a slot.

Bad contents (a truncated file, another version, another group, a bad CRC) are ignored with a WARNING,
never a crash: they only cost the exact pin.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import mmap
import os
import re
import struct
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path

from cadenza.worker.engine.running import IDLE, UNKNOWN, WORDS, idle_words

__all__ = [
    "SLOTS_PER_GROUP",
    "CrashSlot",
    "SlotError",
    "SlotState",
    "default_crash_dir",
    "parse_slot",
]

Key = tuple[str, int]

MAGIC = b"CDZSLOT\x00"
VERSION = 1
#: magic, version, reserved, running offset and partition, hung offset and partition, body length
#: and CRC-32.
HEADER = struct.Struct("<8sIIqQqQII")
#: Byte offset of the words (8-aligned, so a store is one machine word).
WORDS_AT = 16
PAGE = mmap.PAGESIZE
#: Slot files tried per group on one host (one per worker process running there at once).
SLOTS_PER_GROUP = 64

_log = logging.getLogger("cadenza.worker")


def default_crash_dir(state_dir: Path | str | None) -> Path:
    """``<state_dir>/crash`` when the worker has a state directory, else one under the temp directory."""
    if state_dir is not None:
        return Path(state_dir) / "crash"
    return Path(tempfile.gettempdir()) / "cadenza" / "crash"


def group_directory(crash_dir: Path, group: str) -> Path:
    """A file-system-safe directory name per group (readable prefix, hash for uniqueness)."""
    readable = re.sub(r"[^A-Za-z0-9._-]", "_", group)[:60]
    return crash_dir / f"{readable}-{hashlib.sha1(group.encode()).hexdigest()[:10]}"


class SlotError(ValueError):
    """A slot file whose contents cannot be trusted (the reason is the message)."""


@dataclass(frozen=True)
class SlotState:
    """What a dead worker's slot says."""

    group: str
    owner: str
    partitions: tuple[Key, ...]
    #: (partition, offset) of the record running at the death, or ``None``: idle.
    running: tuple[Key, int] | None
    #: The record the hang watchdog declared dead (ran past the poll interval), if any.
    hung: tuple[Key, int] | None
    #: A record was running whose partition or offset the slot could not name.
    unknown: bool = False

    @property
    def culprit(self) -> tuple[Key, int] | None:
        """The record the death is pinned on: a hang the group declared dead, else the running one."""
        return self.hung or self.running


def _decode_pair(offset: int, tag: int, partitions: tuple[Key, ...]) -> tuple[Key, int] | None:
    """The record an (offset, partition) pair names; ``None`` for idle or an unknown partition."""
    if offset == IDLE or tag == UNKNOWN:
        return None
    if not 0 < tag <= len(partitions):
        raise SlotError(f"its words name table entry {tag - 1}, which the table does not have")
    return partitions[tag - 1], offset


def parse_slot(data: bytes, group: str) -> SlotState | None:
    """The state in a slot file's bytes; ``None`` for an empty (new) file; SlotError if untrustworthy."""
    if not data:
        return None
    if len(data) < HEADER.size:
        raise SlotError(f"it is truncated ({len(data)} bytes)")
    magic, version, _, running, running_tag, hung, hung_tag, length, crc = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise SlotError("it is not a cadenza crash slot")
    if version != VERSION:
        raise SlotError(f"it has version {version}, this worker reads version {VERSION}")
    body = data[PAGE : PAGE + length]
    if len(body) != length or zlib.crc32(body) != crc:
        raise SlotError("its partition table is truncated or damaged")
    try:
        decoded = json.loads(body)
        owner, table = str(decoded["owner"]), decoded["partitions"]
        partitions = tuple((str(topic), int(partition)) for topic, partition in table)
        slot_group = decoded["group"]
    except (ValueError, KeyError, TypeError) as exc:
        raise SlotError(f"its partition table does not decode ({exc})") from None
    if slot_group != group:
        raise SlotError(f"it belongs to group {slot_group!r}")
    return SlotState(
        group,
        owner,
        partitions,
        _decode_pair(running, running_tag, partitions),
        _decode_pair(hung, hung_tag, partitions),
        (running != IDLE and running_tag == UNKNOWN) or (hung != IDLE and hung_tag == UNKNOWN),
    )


def _lock(path: Path) -> int | None:
    """An open descriptor of ``path`` holding its exclusive lock, or ``None`` if a live process holds it."""
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        except FileNotFoundError:  # the directory was removed by a worker's clean stop meanwhile
            path.parent.mkdir(parents=True, exist_ok=True)
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        try:  # the file may have been unlinked by its previous holder meanwhile: lock the current one
            if os.fstat(fd).st_ino == os.stat(path).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)


def _read_all(fd: int) -> bytes:
    size = os.fstat(fd).st_size
    return os.pread(fd, size, 0) if size else b""


class CrashSlot:
    """This process's slot of one group (see the module docstring).

    :meth:`take` locks it and reads what dead processes left in it (and in the group's other free
    slots: :attr:`dead`); :meth:`settle` then makes it this worker's. Until then nothing is stored.
    :attr:`words` is what the hot path stores into (``[0]`` the running offset, ``[1]`` its partition's
    tag); :attr:`tags` gives each assigned partition its tag (table index + 1).
    """

    def __init__(self, path: Path, fd: int, group: str, owner: str) -> None:
        self.path = path
        self.group = group
        self.owner = owner
        self._fd: int | None = fd
        self._map: mmap.mmap | None = None
        #: Before settle: a private buffer, so that stores never touch the dead owner's words.
        self.words = idle_words()
        self.tags: dict[Key, int] = {}
        self._table: list[Key] = []
        #: What dead processes of the group left in the free slots this worker found.
        self.dead: list[SlotState] = []
        self._spares: list[tuple[Path, int]] = []

    @classmethod
    def take(cls, crash_dir: Path, group: str, owner: str) -> CrashSlot | None:
        """Lock this process's slot of ``group``; ``None`` (with a WARNING) if none can be had."""
        directory = group_directory(crash_dir, group)
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            _log.warning(
                "no crash slot (cannot create %s: %s); a poison pill is pinned by Kafka marks only",
                directory,
                exc,
            )
            return None
        slot: CrashSlot | None = None
        # The slots left by earlier workers first (every free one is read), then a new one if needed.
        try:
            names = [entry.name for entry in directory.iterdir()]
        except OSError:  # removed by a clean stop meanwhile: there is nothing to read
            names = []
        existing = sorted(
            int(found.group(1))
            for name in names
            if (found := re.fullmatch(r"slot-(\d+)", name)) and int(found.group(1)) < SLOTS_PER_GROUP
        )
        fresh = (n for n in range(SLOTS_PER_GROUP) if n not in existing)
        for index in [*existing, *fresh]:
            if slot is not None and index not in existing:
                break
            path = directory / f"slot-{index}"
            try:
                fd = _lock(path)
            except OSError as exc:
                _log.warning("crash slot %s cannot be opened: %s", path, exc)
                continue
            if fd is None:
                continue  # a live worker holds it
            try:
                state = parse_slot(_read_all(fd), group)
            except SlotError as exc:
                _log.warning("crash slot %s is ignored: %s", path, exc)
                state = None
            except OSError as exc:
                _log.warning("crash slot %s cannot be read: %s", path, exc)
                state = None
            if slot is None:
                slot = cls(path, fd, group, owner)
            else:
                slot._spares.append((path, fd))
            if state is not None:
                slot.dead.append(state)
        if slot is None:
            _log.warning(
                "no free crash slot among %d in %s; a poison pill is pinned by Kafka marks only",
                SLOTS_PER_GROUP,
                directory,
            )
        return slot

    def settle(self) -> bool:
        """The dead states are dealt with: make the slot this worker's (empty table, idle) and let the
        spare slots go (removed while locked, so that no one else reads them again).

        False (with a WARNING, the slot released) if the file cannot be written or mapped (a full disk,
        a file system without shared mappings): the worker then runs without a slot."""
        for path, spare in self._spares:
            with contextlib.suppress(OSError):
                path.unlink()
            os.close(spare)
        self._spares = []
        if self._fd is None or self._map is not None:
            return self._map is not None
        try:
            self._write_table()
            self._map = mmap.mmap(self._fd, PAGE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except OSError as exc:
            _log.warning(
                "crash slot %s cannot be written (%s); a poison pill is pinned by Kafka marks only",
                self.path,
                exc,
            )
            self.close(clean=False)
            return False
        self.words = memoryview(self._map)[WORDS_AT : WORDS_AT + 8 * WORDS].cast("q")
        return True

    def _write_table(self) -> None:
        """Rewrite the body and its header fields (rare: at settle and when new partitions come)."""
        fd = self._fd
        if fd is None:
            return
        body = json.dumps({"group": self.group, "owner": self.owner, "partitions": self._table}).encode()
        os.ftruncate(fd, PAGE + len(body))
        os.pwrite(fd, body, PAGE)
        if self._map is None:  # first write: the whole header, words idle
            header = HEADER.pack(MAGIC, VERSION, 0, IDLE, UNKNOWN, IDLE, UNKNOWN, len(body), zlib.crc32(body))
            os.pwrite(fd, header, 0)
        else:  # the words are live in the mapping: only the length and CRC change
            struct.pack_into("<II", self._map, WORDS_AT + 8 * WORDS, len(body), zlib.crc32(body))

    def assign(self, keys: list[Key]) -> None:
        """Give newly assigned partitions a table entry (kept for the process's life) before they run."""
        new = [key for key in keys if key not in self.tags]
        if not new or self._fd is None:
            return
        start = len(self._table)
        self._table.extend(new)
        try:
            self._write_table()
        except OSError as exc:  # a full disk, say: their records are then named unknown
            _log.warning("crash slot %s: the partition table could not be written: %s", self.path, exc)
            del self._table[-len(new) :]
            return
        for index, key in enumerate(new, start + 1):
            self.tags[key] = index

    def running(self, key: Key, offset: int) -> None:
        """Record ``offset`` of ``key`` starts (the rare paths; the hot ones inline these stores)."""
        words = self.words
        words[0] = IDLE  # never a mixed pair
        words[1] = self.tags.get(key, UNKNOWN)
        words[0] = offset

    def idle(self) -> None:
        self.words[0] = IDLE

    def hung(self, key: Key, offset: int) -> None:
        """The watchdog declared the call on ``offset`` dead (past the poll interval)."""
        words = self.words
        words[3] = self.tags.get(key, UNKNOWN)
        words[2] = offset

    def close(self, clean: bool) -> None:
        """Release the slot. After a clean stop it is removed (nothing in it matters); otherwise, or if
        it was never settled, it is kept for the next worker to read."""
        for _path, spare in self._spares:  # never settled: keep their contents for the next worker
            os.close(spare)
        self._spares = []
        fd, self._fd = self._fd, None
        if fd is None:
            return
        words, self.words = self.words, idle_words()
        settled = self._map is not None
        if self._map is not None:
            words.release()  # every user must have dropped it (the executor: see Worker.close)
            self._map.close()
            self._map = None
        clean = clean and settled  # never settled: it still holds a dead worker's state
        if clean:
            with contextlib.suppress(OSError):
                self.path.unlink()
        os.close(fd)
        if clean:
            with contextlib.suppress(OSError):  # not empty: other workers' slots
                self.path.parent.rmdir()
