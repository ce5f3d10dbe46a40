"""Choosing the state store of each stateful step: a store factory, built in or the user's.

The worker asks a :data:`StoreFactory` for one store per stateful step, naming the step, so the
choice is made once per worker rather than per operator. Two factories are built in: ``memory`` (the
default) and ``rocksdb``, whose stores get a directory of their own under ``state_dir``, made unique
per worker instance (several workers may run in one process or on one host, and RocksDB locks its
directory). Anything else is a user's factory: a callable, or its ``package.module:factory`` import
path (what ``cadenza worker --state-store`` takes). A user's factory is checked on every call, so a
store that does not implement :class:`~cadenza.state.store.StateStore` fails the worker's start with
one line naming the spec, not a step with an ``AttributeError`` later.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from cadenza.errors import ConfigError
from cadenza.import_path import resolve_import_path
from cadenza.state.store import InMemoryStateStore, StateStore

__all__ = [
    "STORE_KINDS",
    "StoreFactory",
    "StoreKind",
    "load_store_factory",
    "memory_stores",
    "rocksdb_stores",
    "store_factory",
]

StoreKind = Literal["memory", "rocksdb"]
STORE_KINDS: tuple[StoreKind, ...] = ("memory", "rocksdb")

#: Makes the store of one stateful step; the argument names it (``"<pipeline>/<step>"``).
StoreFactory = Callable[[str], StateStore]

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_HINT = f"use one of {', '.join(STORE_KINDS)}, or 'package.module:factory' for a store factory of your own"
_METHODS = ("get", "put", "delete", "items", "size", "drop", "close")


def store_factory(kind: str | StoreFactory = "memory", state_dir: str | Path | None = None) -> StoreFactory:
    """The factory ``kind`` names: ``memory``, ``rocksdb`` (needs ``state_dir``), a
    ``package.module:factory`` path or a factory itself. Raises :class:`ConfigError` naming the problem
    (an unknown kind, a module or attribute not found, not callable, a missing or unusable directory)
    before any store exists."""
    if callable(kind):
        return _checked(kind, _label(kind))
    if not isinstance(kind, str) or not kind.strip():
        raise ConfigError(f"state store must be a name or a store factory, got {kind!r}; {_HINT}")
    spec = kind.strip()
    if spec == "memory":
        return memory_stores
    if spec == "rocksdb":
        return rocksdb_stores(state_dir)
    if ":" in spec:
        return _checked(load_store_factory(spec), repr(spec))
    raise ConfigError(f"unknown state store {spec!r}; {_HINT}")


def memory_stores(name: str) -> StateStore:
    """The built-in ``memory`` factory: a dict per partition, rebuilt from the changelog."""
    return InMemoryStateStore()


def rocksdb_stores(state_dir: str | Path | None) -> StoreFactory:
    """The built-in ``rocksdb`` factory: one RocksDB directory per step under ``state_dir``."""
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


def load_store_factory(spec: str) -> Callable[[str], object]:
    """The callable behind ``package.module:factory`` (not yet checked to return stores)."""
    target = resolve_import_path(spec, "state store", "package.module:factory")
    if not callable(target):
        raise ConfigError(
            f"state store {spec!r} is a {type(target).__name__}, not callable; a store factory takes the "
            "step's name and returns a StateStore"
        )
    return target


def _label(factory: object) -> str:
    module = getattr(factory, "__module__", None)
    name = getattr(factory, "__qualname__", None) or type(factory).__qualname__
    return f"'{module}:{name}'" if module else repr(factory)


def _checked(factory: Callable[[str], object], label: str) -> StoreFactory:
    """``factory``, refusing with one line a call that raises or returns something not a store."""

    def make(name: str) -> StateStore:
        try:
            store = factory(name)
        except ConfigError:
            raise
        except Exception as exc:
            raise ConfigError(
                f"state store {label}: the factory raised for step {name!r}: {type(exc).__name__}: {exc}"
            ) from exc
        missing = [method for method in _METHODS if not callable(getattr(store, method, None))]
        if missing:
            raise ConfigError(
                f"state store {label}: the factory returned {type(store).__name__}, not a StateStore "
                f"(it lacks {', '.join(missing)})"
            )
        return store  # type: ignore[return-value]

    return make
