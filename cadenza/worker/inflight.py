"""Which offsets may be committed when records run out of order.

The scheduler runs records by deadline, so records of one input partition finish out of offset order
whenever two sub-topologies read the same topic (each decoded record becomes one unit per
sub-topology, queued in different operator-partitions). Kafka only stores one offset per partition:
"everything below this is done". So per input partition this keeps, in offset order, the records
that still have units queued or running; the committable offset is the first of them, or the next
offset after the last fetched record when none is left.

The per-record cost is one small list per record that has units (``[offset, units left]``), made at
admission, and one decrement when each unit has run; the queue is trimmed only when offsets are
collected for a commit.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

__all__ = ["InFlight", "PartitionProgress", "Pending"]

Pending = list[int]
"""``[offset, units not yet run]`` for one consumed record; the executor decrements the second item."""


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
        return queue[0][0] if queue else self.fetched

    def __len__(self) -> int:
        return len(self.queue)


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
