"""The windowed workload of S3, shared by the harness, the output counter and every system's app.

Standard library only (it runs in cadenza's venv and in each peer's). The input is the map workload's
seeded JSON records (:func:`peers.workload.make_records`), each given an event time ``ts`` (seconds,
also the Kafka record timestamp, in ms) and sent to the partition of its key (``user``, 1,000
distinct keys), so a key's records meet in one partition as every system's keyed state requires.
Each system counts records per key in tumbling 1-second event-time windows.

**Event time.** 5,000 records per event-time second (200k records: 40 windows; about 5 records per
key and window), each ``[0, 80)`` ms after its index's place on that grid, so within a partition a record
is at most 80 ms behind the newest event time before it: with ``max_out_of_orderness`` / grace of
100 ms in every system, no record is late anywhere, and every system must find the same counts.
After the data, one **flush record** per partition with an event time an hour past the last closes
every window still open (its own window, under :data:`FLUSH_KEY`, never closes and is ignored).

**Results.** cadenza writes ``{"key", "window_start", "window_end", "value"}`` (seconds), quixstreams
``{"start", "end", "value"}`` (ms; the key in the Kafka key), faust (which emits an update per input
record, see ``faust_windowed.py``) the quixstreams shape. :func:`parse_result` reads all of them;
:class:`WindowTally` keeps what the counter read and compares it with :func:`brute_force_counts`.
"""

from __future__ import annotations

import json
import random
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from peers.workload import make_records

__all__ = [
    "FLUSH_KEY",
    "MAX_OUT_OF_ORDERNESS_MS",
    "WINDOW_MS",
    "WindowTally",
    "WindowedRecord",
    "brute_force_counts",
    "flush_records",
    "make_windowed_records",
    "parse_result",
    "records_after_first_close",
    "window_start_ms",
]

WINDOW_MS = 1000
MAX_OUT_OF_ORDERNESS_MS = 100
JITTER_MS = 80
RECORDS_PER_EVENT_SECOND = 5000
#: 2026-01-01T00:00:00Z: in the past (cadenza dead-letters event times far ahead), on a window bound.
BASE_MS = 1_767_225_600_000
FLUSH_KEY = "__flush__"
FLUSH_AHEAD_MS = 3_600_000

WindowKey = tuple[str, int]


@dataclass(frozen=True)
class WindowedRecord:
    key: str
    partition: int
    timestamp_ms: int
    value: bytes


def window_start_ms(timestamp_ms: int) -> int:
    return timestamp_ms - timestamp_ms % WINDOW_MS


def partition_of(key: str, partitions: int) -> int:
    """The key's partition: CRC-32, so the harness and a reader agree without a client's partitioner."""
    return zlib.crc32(key.encode()) % partitions


def _record(key: str, partition: int, timestamp_ms: int, value: dict[str, Any]) -> WindowedRecord:
    payload = {**value, "ts": timestamp_ms / 1000}
    return WindowedRecord(key, partition, timestamp_ms, json.dumps(payload, separators=(",", ":")).encode())


def make_windowed_records(count: int, seed: int, partitions: int) -> list[WindowedRecord]:
    """``count`` data records (no flush records), the same for the same ``seed``."""
    rng = random.Random(seed + 1)
    records = []
    for i, (key, value) in enumerate(make_records(count, seed)):
        timestamp_ms = BASE_MS + i * 1000 // RECORDS_PER_EVENT_SECOND + rng.randrange(JITTER_MS)
        user = key.decode()
        records.append(_record(user, partition_of(user, partitions), timestamp_ms, json.loads(value)))
    return records


def flush_records(records: Iterable[WindowedRecord], partitions: int) -> list[WindowedRecord]:
    """One record per partition far enough ahead in event time to close every data window."""
    last = max(record.timestamp_ms for record in records)
    at = last + FLUSH_AHEAD_MS
    return [_record(FLUSH_KEY, p, at, {"id": -1, "user": FLUSH_KEY}) for p in range(partitions)]


def brute_force_counts(records: Iterable[WindowedRecord]) -> dict[WindowKey, int]:
    """Records per (key, window start in ms), flush records left out: what every system must emit."""
    counts: dict[WindowKey, int] = {}
    for record in records:
        if record.key == FLUSH_KEY:
            continue
        window = (record.key, window_start_ms(record.timestamp_ms))
        counts[window] = counts.get(window, 0) + 1
    return counts


def records_after_first_close(records: Iterable[WindowedRecord]) -> int:
    """Data records at or past the point that closes the first window (its end + the out-of-orderness).

    A system emitting final results can emit nothing before one partition reaches that point, so these
    are (to within one partition's progress) the records it still had to read when its first result
    came out: the records its first-to-last-result time is spent on.
    """
    data = [record for record in records if record.key != FLUSH_KEY]
    if not data:
        return 0
    closes_at = window_start_ms(min(r.timestamp_ms for r in data)) + WINDOW_MS + MAX_OUT_OF_ORDERNESS_MS
    return sum(1 for record in data if record.timestamp_ms >= closes_at)


def parse_result(key: bytes | None, value: bytes | None) -> tuple[str, int, int]:
    """(key, window start in ms, count) of one output record, whichever system wrote it.

    Raises ValueError for anything else, so a counter can count what it could not read instead of
    crashing or silently taking it.
    """
    if value is None:
        raise ValueError("an output record without a value")
    try:
        data = json.loads(value)
    except ValueError as exc:
        raise ValueError(f"an output value that is not JSON: {value[:80]!r}") from exc
    if not isinstance(data, dict):
        raise ValueError(f"an output value that is not an object: {value[:80]!r}")
    try:
        if "window_start" in data:  # cadenza: bounds in seconds, the key in the value too
            start_ms = round(float(data["window_start"]) * 1000)
            name = data.get("key") if key is None else key.decode()
        elif "start" in data:  # quixstreams' final() shape (and faust's app), bounds in ms
            start_ms = int(data["start"])
            name = None if key is None else key.decode()
        else:
            raise ValueError(f"an output value with no window start: {value[:80]!r}")
    except (TypeError, OverflowError, UnicodeDecodeError) as exc:
        raise ValueError(f"an output record with an unreadable key or window start: {value[:80]!r}") from exc
    count = data.get("value")
    if not isinstance(name, str) or isinstance(count, bool) or not isinstance(count, int):
        raise ValueError(f"an output record without a key or an integer count: {key!r} {value[:80]!r}")
    if start_ms % WINDOW_MS:
        raise ValueError(f"a window start {start_ms} ms that is not on a {WINDOW_MS} ms bound")
    return name, start_ms, count


@dataclass
class WindowTally:
    """The results read so far: the largest count per (key, window), and how many records said it.

    The largest, because a system emitting updates (faust) says each window's count once per record
    and the last one is the total; a system emitting final results says it once.
    """

    counts: dict[WindowKey, int] = field(default_factory=dict)
    outputs: int = 0
    unreadable: int = 0
    duplicates: int = 0

    def add(self, key: str, start_ms: int, count: int) -> None:
        if key == FLUSH_KEY:
            return
        self.outputs += 1
        window = (key, start_ms)
        before = self.counts.get(window)
        if before is None:
            self.counts[window] = count
        else:
            self.duplicates += 1
            self.counts[window] = max(before, count)

    def read(self, key: bytes | None, value: bytes | None) -> None:
        try:
            self.add(*parse_result(key, value))
        except ValueError:
            self.unreadable += 1

    def to_json(self) -> dict[str, Any]:
        return {
            "outputs": self.outputs,
            "unreadable": self.unreadable,
            "duplicates": self.duplicates,
            "counts": [[key, start, count] for (key, start), count in self.counts.items()],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> WindowTally:
        counts = {(str(key), int(start)): int(count) for key, start, count in data["counts"]}
        return cls(counts, int(data["outputs"]), int(data["unreadable"]), int(data["duplicates"]))

    def compare(self, expected: Mapping[WindowKey, int], *, updates: bool) -> dict[str, Any]:
        """How the tally differs from the brute-force counts; ``results_correct`` if not at all.

        For a system emitting final results a second result for a window is an error too (none is
        restarted or rebalanced during a run); for one emitting updates it is the point.
        """
        missing = [window for window in expected if window not in self.counts]
        extra = [window for window in self.counts if window not in expected]
        wrong = [w for w, count in self.counts.items() if w in expected and expected[w] != count]
        correct = not missing and not extra and not wrong and not self.unreadable
        if not updates:
            correct = correct and not self.duplicates
        return {
            "results_correct": correct,
            "windows_expected": len(expected),
            "windows_seen": len(self.counts),
            "windows_missing": len(missing),
            "windows_extra": len(extra),
            "windows_wrong": len(wrong),
            "unreadable_outputs": self.unreadable,
            "duplicate_outputs": self.duplicates,
            "examples": [list(w) for w in (missing + extra + wrong)[:5]],
        }
