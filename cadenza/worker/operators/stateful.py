"""What the worker needs from a stateful step: restore on assignment, drop on revocation, changelog writes.

Window aggregates (:class:`~cadenza.worker.operators.window.WindowOp`) and both inputs of a join
(:class:`~cadenza.worker.operators.join.JoinInput`) satisfy it, so the runtime and the restorer handle
them alike: per (step, input partition), whatever the step is.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, Protocol

from cadenza.state import ChangelogWrite, Position
from cadenza.worker.unit import Unit

__all__ = ["StatefulStep"]


class StatefulStep(Protocol):
    @property
    def node_id(self) -> str:
        """The step's id in the compiled graph (for messages)."""
        ...

    @property
    def changelog_topic(self) -> str:
        """Partition ``p`` of this topic holds the state of input partition ``p``."""
        ...

    @property
    def touched(self) -> Collection[int]:
        """Partitions changed since the last :meth:`changelog_writes` (empty: nothing to write)."""
        ...

    def restore(self, partition: int, entries: dict[Any, Any], position: Position | None) -> None:
        """Start ``partition`` from restored state (or empty, when ``position`` is None)."""
        ...

    def drop(self, partition: int) -> None:
        """Forget a revoked or lost partition."""
        ...

    def changelog_writes(self) -> list[tuple[int, list[ChangelogWrite]]]:
        """Per touched partition, its changed keys and then its position marker; clears ``touched``."""
        ...

    def progress(self, unit: Unit, source: int, event_time: float) -> None:
        """Apply a progress record (``unit``): upstream partition ``source`` got to ``event_time``."""
        ...

    @property
    def idle_timeouts(self) -> int:
        """How many times the idle timeout of one of the step's watermark inputs fired."""
        ...
