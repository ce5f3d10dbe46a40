"""Which offsets may be committed when records run out of order.

The scheduler runs records by deadline, so records of one input partition finish out of offset order
whenever two sub-topologies read the same topic (each decoded record becomes one unit per
sub-topology, queued in different operator-partitions). Kafka only stores one offset per partition:
"everything below this is done". So per input partition this keeps, in offset order, the records
that still have units queued or running; the committable offset is the first of them, or the next
offset after the last fetched record when none is left.

An entry is a list whose second item counts the units not yet run (the executor decrements it):

- one record, ``[offset, units left]``: the general case (several sub-topologies read the topic, so
  its units run in any order; or a stopped pipeline holds the record back);
- a run, ``[first offset, units left, offset, offset, ...]``: the records of one partition admitted
  in one batch when exactly one sub-topology reads the topic and none is stopped. Each such record is
  one unit, all of them in one operator-partition, whose records run in offset order (the
  scheduler's level 2), so with ``n`` offsets and ``left`` units left the first unfinished record is
  the ``n - left``-th: the committable offset is exactly the one per-record entries would give.
  Records dead-lettered at decode have no unit and are not in the run (done, as with their own entry).

So the per-record cost is an append of the offset to the run (no object per record for the garbage
collector to track) and one decrement when the unit has run; the queue is trimmed only when offsets
are collected for a commit.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

__all__ = ["InFlight", "PartitionProgress", "Pending"]

Pending = list[int]
"""``[offset, units not yet run]`` for one consumed record, or ``[first offset, units not yet run,
offset, ...]`` for a run of them; the executor decrements the second item."""


class PartitionProgress:
    """The records of one input partition that are not finished, in offset order."""

    __slots__ = ("committed", "fetched", "queue")

    def __init__(self) -> None:
        self.queue: deque[Pending] = deque()
        #: Next offset after the last record admitted (-1 before the first).
        self.fetched = -1
        #: The last offset handed to a commit (-1 before the first).
        self.committed = -1

    def committable(self) -> int:
        """The offset below which every record has finished (-1 if nothing was admitted)."""
        queue = self.queue
        while queue and queue[0][1] <= 0:
            queue.popleft()
        if not queue:
            return self.fetched
        head = queue[0]
        # A run's records finish in offset order: the first unfinished is ``left`` from its end.
        return head[len(head) - head[1]] if len(head) > 2 else head[0]

    def __len__(self) -> int:
        """Records with units left."""
        return sum((entry[1] if len(entry) > 2 else 1) for entry in self.queue if entry[1] > 0)


class InFlight:
    """Unfinished records per ``(topic, partition)``, and the offsets that became committable."""

    __slots__ = ("partitions",)

    def __init__(self) -> None:
        self.partitions: dict[tuple[str, int], PartitionProgress] = {}

    def progress(self, topic: str, partition: int) -> PartitionProgress:
        key = (topic, partition)
        progress = self.partitions.get(key)
        if progress is None:
            progress = self.partitions[key] = PartitionProgress()
        return progress

    def admitted(self, progress: PartitionProgress, offset: int, pending: Pending) -> None:
        """Record that ``offset`` was fetched; ``pending`` holds how many of its units were queued.

        ``Worker.admit`` inlines this (a call per record); a change here goes there too."""
        progress.fetched = offset + 1
        if pending[1] > 0:
            progress.queue.append(pending)

    def advanced(self) -> dict[tuple[str, int], int]:
        """Committable offsets that moved since the last call; they count as handed to a commit."""
        moved: dict[tuple[str, int], int] = {}
        for key, progress in self.partitions.items():
            offset = progress.committable()
            if offset > progress.committed:
                progress.committed = offset
                moved[key] = offset
        return moved

    def unfinished(self) -> int:
        """Records with units still queued or running, across partitions."""
        return sum(len(progress) for progress in self.partitions.values())

    def forget(self, keys: Iterable[tuple[str, int]]) -> None:
        """Drop partitions this worker no longer owns (their records are someone else's now)."""
        for key in keys:
            self.partitions.pop(key, None)
