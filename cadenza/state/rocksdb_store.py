"""A :class:`~cadenza.state.store.StateStore` on RocksDB (through ``rocksdict``), for state beyond memory.

One RocksDB database per partition, in its own directory under the store's directory, so a revoked
partition is dropped by deleting one directory and partitions never contend for one database's lock.
Keys and values are written in the same encodings as the changelog (:mod:`cadenza.state.serde`), so
a value that cannot be changelogged cannot be stored either, and nothing read back is unpickled.

The changelog stays the source of truth: a partition's directory is wiped when the partition is
opened, and its state then comes from the changelog restore. Reusing local files across restarts
would need a checkpoint of the changelog position next to them; until then a local copy could only
be stale, so it is never trusted.

Reads decode on every ``get`` (RocksDB returns fresh bytes), which makes this store slower per
record than the in-memory one; it trades that for state bounded by disk rather than by memory.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Hashable, Iterator
from pathlib import Path
from typing import Any

from cadenza.errors import ConfigError
from cadenza.state.serde import decode_key, decode_value, encode_key, encode_value

__all__ = ["RocksDBStateStore"]


def _rocksdict() -> Any:
    try:
        import rocksdict  # noqa: PLC0415 - an optional extra, imported only by those who pick it
    except ImportError as exc:  # pragma: no cover - the dev extra installs it
        raise ConfigError(
            "the rocksdb state store needs the rocksdict package: pip install 'cadenza[rocksdb]'"
        ) from exc
    return rocksdict


class RocksDBStateStore:
    """Partition ``p`` lives in ``<directory>/p<p>``; ``directory`` must be this store's alone."""

    __slots__ = ("_closed", "_directory", "_module", "_options", "_partitions")

    def __init__(self, directory: str | Path) -> None:
        self._module = _rocksdict()
        self._directory = Path(directory)
        try:
            self._directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"cannot create the state directory {str(self._directory)!r}: {exc}") from exc
        options = self._module.Options(raw_mode=True)
        options.create_if_missing(True)
        self._options = options
        self._partitions: dict[int, Any] = {}
        self._closed = False

    @property
    def directory(self) -> Path:
        return self._directory

    def _path(self, partition: int) -> Path:
        return self._directory / f"p{partition}"

    def _db(self, partition: int) -> Any:
        db = self._partitions.get(partition)
        if db is None:
            if self._closed:
                raise RuntimeError("the RocksDB state store is closed")
            path = self._path(partition)
            shutil.rmtree(path, ignore_errors=True)  # never trust a local copy: the changelog restores it
            db = self._partitions[partition] = self._module.Rdict(str(path), options=self._options)
        return db

    def get(self, partition: int, key: Hashable) -> Any:
        db = self._partitions.get(partition)
        if db is None:
            return None
        raw = db.get(encode_key(key))
        return None if raw is None else decode_value(raw)

    def put(self, partition: int, key: Hashable, value: Any) -> None:
        if value is None:
            raise ValueError("None is not a storable state value; delete the key instead")
        data = encode_value(value)  # before opening anything: a value that cannot be stored changes nothing
        self._db(partition)[encode_key(key)] = data

    def delete(self, partition: int, key: Hashable) -> None:
        db = self._partitions.get(partition)
        if db is not None:
            del db[encode_key(key)]

    def items(self, partition: int) -> Iterator[tuple[Any, Any]]:
        db = self._partitions.get(partition)
        if db is None:
            return iter(())
        return ((decode_key(key), decode_value(value)) for key, value in db.items())

    def size(self, partition: int) -> int:
        """Counts by iterating the keys: RocksDB keeps no exact count, and callers rarely ask."""
        db = self._partitions.get(partition)
        return 0 if db is None else sum(1 for _ in db.keys())  # noqa: SIM118 - an Rdict, not a dict

    def drop(self, partition: int) -> None:
        db = self._partitions.pop(partition, None)
        if db is not None:
            db.close()
        shutil.rmtree(self._path(partition), ignore_errors=True)

    def close(self) -> None:
        """Close every partition's database and delete the store's directory (it is only a cache)."""
        self._closed = True
        for partition in list(self._partitions):
            self.drop(partition)
        with contextlib.suppress(OSError):
            self._directory.rmdir()

    @property
    def partitions(self) -> list[int]:
        return sorted(self._partitions)
