"""Operator state: per-partition stores backed by compacted changelog topics.

``store`` holds the state, ``changelog`` says what is written and how it is replayed, ``serde`` turns
keys and values into bytes, ``restore`` reads changelog partitions back from the broker.
"""

from cadenza.state.changelog import ChangelogReplay, ChangelogView, ChangelogWrite
from cadenza.state.factory import (
    STORE_KINDS,
    StoreFactory,
    StoreKind,
    load_store_factory,
    memory_stores,
    rocksdb_stores,
    store_factory,
)
from cadenza.state.restore import restore_changelogs
from cadenza.state.serde import (
    POSITION_KEY,
    Position,
    StateDecodeError,
    decode_key,
    decode_position,
    decode_value,
    encode_key,
    encode_position,
    encode_value,
)
from cadenza.state.store import InMemoryStateStore, PartitionState, StateStore

__all__ = [
    "POSITION_KEY",
    "STORE_KINDS",
    "ChangelogReplay",
    "ChangelogView",
    "ChangelogWrite",
    "InMemoryStateStore",
    "PartitionState",
    "Position",
    "StateDecodeError",
    "StateStore",
    "StoreFactory",
    "StoreKind",
    "decode_key",
    "decode_position",
    "decode_value",
    "encode_key",
    "encode_position",
    "encode_value",
    "load_store_factory",
    "memory_stores",
    "restore_changelogs",
    "rocksdb_stores",
    "store_factory",
]
