"""Keyed operator state, one store per stateful operator, split by input partition.

State is split by partition because partitions move between workers: when one is revoked its state
must go with it (and nothing else), and when one is assigned its state is rebuilt from that
partition's changelog alone. ``None`` is not a storable value: it means "absent", which is also what a
changelog tombstone restores to.

Built in: :class:`InMemoryStateStore` here, and :class:`~cadenza.state.rocksdb_store.RocksDBStateStore`
for state larger than memory; a user's store implements :class:`StateStore` and comes from a store
factory (:func:`~cadenza.state.factory.store_factory`). The worker only uses these methods.

The pure-logic operators (window aggregation, windowed join) see one partition of a store as a
mapping (:data:`PartitionState`): :class:`~cadenza.state.changelog.ChangelogView` in the worker, a
plain dict in tests.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, MutableMapping
from typing import Any, Protocol, TypeAlias, runtime_checkable

__all__ = ["InMemoryStateStore", "PartitionState", "StateStore"]

#: One partition of a :class:`StateStore` as a mapping: what window aggregation and the join keep
#: their entries in. Operators write an entry back after changing it (never mutate what they read)
#: and delete entries they empty, so a changelogged view sees every change.
PartitionState: TypeAlias = MutableMapping[Any, Any]


@runtime_checkable
class StateStore(Protocol):
    """What a stateful operator needs from its store."""

    def get(self, partition: int, key: Hashable) -> Any:
        """The value of ``key`` in ``partition``, or ``None`` when there is none."""
        ...

    def put(self, partition: int, key: Hashable, value: Any) -> None:
        """Set ``key``; ``value`` must not be ``None`` (use :meth:`delete`)."""
        ...

    def delete(self, partition: int, key: Hashable) -> None:
        """Remove ``key``; removing an absent key is not an error."""
        ...

    def items(self, partition: int) -> Iterator[tuple[Any, Any]]:
        """Every entry of ``partition``; the partition must not change while this is iterated."""
        ...

    def size(self, partition: int) -> int:
        """How many keys ``partition`` holds."""
        ...

    def drop(self, partition: int) -> None:
        """Forget everything about ``partition`` (it was revoked or lost)."""
        ...

    def close(self) -> None:
        """Release what the store holds (files, handles); the store is not used afterwards."""
        ...


class InMemoryStateStore:
    """A dict per partition: the fastest store, bounded by memory, rebuilt from the changelog."""

    __slots__ = ("_partitions",)

    def __init__(self) -> None:
        self._partitions: dict[int, dict[Hashable, Any]] = {}

    def _table(self, partition: int) -> dict[Hashable, Any]:
        table = self._partitions.get(partition)
        if table is None:
            table = self._partitions[partition] = {}
        return table

    def get(self, partition: int, key: Hashable) -> Any:
        table = self._partitions.get(partition)
        return None if table is None else table.get(key)

    def put(self, partition: int, key: Hashable, value: Any) -> None:
        if value is None:
            raise ValueError("None is not a storable state value; delete the key instead")
        self._table(partition)[key] = value

    def delete(self, partition: int, key: Hashable) -> None:
        table = self._partitions.get(partition)
        if table is not None:
            table.pop(key, None)

    def items(self, partition: int) -> Iterator[tuple[Any, Any]]:
        table = self._partitions.get(partition)
        return iter(()) if table is None else iter(table.items())

    def size(self, partition: int) -> int:
        table = self._partitions.get(partition)
        return 0 if table is None else len(table)

    def drop(self, partition: int) -> None:
        self._partitions.pop(partition, None)

    def close(self) -> None:
        self._partitions.clear()

    @property
    def partitions(self) -> list[int]:
        return sorted(self._partitions)
