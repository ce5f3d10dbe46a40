"""Choosing the state store of each stateful step: ``memory`` (the default) or ``rocksdb``.

The worker asks a :data:`StoreFactory` for one store per stateful step, naming the step, so the
choice is made once per worker rather than per operator. RocksDB stores get a directory of their own
under ``state_dir``, made unique per worker instance: several workers may run in one process or on
one host (tests, scale-out on one machine), and RocksDB locks its directory.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from cadenza.errors import ConfigError
from cadenza.state.store import InMemoryStateStore, StateStore

__all__ = ["STORE_KINDS", "StoreFactory", "StoreKind", "store_factory"]

StoreKind = Literal["memory", "rocksdb"]
STORE_KINDS: tuple[StoreKind, ...] = ("memory", "rocksdb")

#: Makes the store of one stateful step; the argument names it (``"<pipeline>/<step>"``).
StoreFactory = Callable[[str], StateStore]

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def store_factory(kind: str = "memory", state_dir: str | Path | None = None) -> StoreFactory:
    """A factory for ``kind`` stores; ``rocksdb`` needs ``state_dir``. Raises :class:`ConfigError`
    naming the problem (an unknown kind, a missing or unusable directory) before any store exists."""
    if kind == "memory":
        return _memory
    if kind != "rocksdb":
        raise ConfigError(f"unknown state store {kind!r}; use one of {', '.join(STORE_KINDS)}")
    if state_dir is None:
        raise ConfigError("the rocksdb state store needs a state directory (state_dir)")
    root = Path(state_dir).expanduser()
    if root.exists() and not root.is_dir():
        raise ConfigError(f"state directory {str(root)!r} exists and is not a directory")
    instance = root / f"worker-{uuid.uuid4().hex[:12]}"
    from cadenza.state.rocksdb_store import RocksDBStateStore  # noqa: PLC0415 - rocksdict is optional

    def rocksdb(name: str) -> StateStore:
        return RocksDBStateStore(instance / (_UNSAFE.sub("_", name) or "state"))

    return rocksdb


def _memory(name: str) -> StateStore:
    return InMemoryStateStore()
