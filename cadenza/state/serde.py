"""Bytes for state keys, state values and the changelog's position marker.

Keys must encode *deterministically*, equal keys to equal bytes in every process, or a compacted
changelog keeps two live records for one key and a repartition topic sends one key to two
partitions. So common key types get a fixed tagged form (``s`` str, ``i`` int, ``f`` float with
``-0.0`` folded into ``0.0``, ``b`` bytes, ``n`` None, ``t`` tuple of length-prefixed encoded items,
``m`` pydantic model as its class path plus JSON); other keys are pickled, which is deterministic for
plain values but not for sets, so set-like keys are a user error.
Pydantic models are *not* pickled as keys because their pickles contain a set of field names whose
order depends on the process's hash seed.

Values are pickled: window accumulators and buffered records may be any Python object the user's
functions produce, and both ends of a changelog are cadenza workers running the same code. The
changelog is an internal topic; whoever can write to it can corrupt state anyway.

The first byte ``0x00`` is reserved for cadenza's own records in a changelog (the position marker),
so they can never collide with an encoded key.
"""

from __future__ import annotations

import importlib
import math
import pickle
import struct
import sys
from dataclasses import dataclass, field
from typing import Any

import pydantic_core
from pydantic import BaseModel

from cadenza.errors import CadenzaError

__all__ = [
    "POSITION_KEY",
    "Position",
    "StateDecodeError",
    "decode_key",
    "decode_position",
    "decode_value",
    "encode_key",
    "encode_position",
    "encode_value",
]

#: Changelog key of the marker saying which input offset the state before it reflects.
POSITION_KEY = b"\x00cadenza-position"

_PICKLE_PROTOCOL = pickle.HIGHEST_PROTOCOL
_LENGTH = struct.Struct(">I")


class StateDecodeError(CadenzaError):
    """Changelog or repartition bytes could not be read back (written by another version, or corrupt)."""


def encode_key(key: Any) -> bytes:
    """Deterministic bytes of a state or record key (see the module docstring)."""
    kind = type(key)
    if kind is str:
        return b"s" + str.encode(key)
    if kind is int:
        return b"i" + str(key).encode()
    if kind is bytes:
        return b"b" + bytes(key)
    if key is None:
        return b"n"
    if kind is float:
        return b"f" + repr(key + 0.0).encode()  # + 0.0 turns -0.0 into 0.0, which it equals
    if kind is tuple:
        parts = [b"t"]
        for item in key:
            encoded = encode_key(item)
            parts.append(_LENGTH.pack(len(encoded)))
            parts.append(encoded)
        return b"".join(parts)
    if isinstance(key, BaseModel):
        path = f"{kind.__module__}:{kind.__qualname__}".encode()
        return b"m" + path + b"\x00" + key.__pydantic_serializer__.to_json(key)
    return b"p" + pickle.dumps(key, protocol=_PICKLE_PROTOCOL)


def decode_key(data: bytes) -> Any:
    """The key :func:`encode_key` encoded."""
    if not data:
        raise StateDecodeError("empty state key")
    tag = data[0]
    body = data[1:]
    try:
        if tag == 0x73:  # s
            return body.decode()
        if tag == 0x69:  # i
            return int(body)
        if tag == 0x62:  # b
            return body
        if tag == 0x6E:  # n
            return None
        if tag == 0x66:  # f
            return float(body)
        if tag == 0x74:  # t
            return _decode_tuple(body)
        if tag == 0x6D:  # m
            path, _, payload = body.partition(b"\x00")
            return _model_class(path.decode()).model_validate_json(payload)
        if tag == 0x70:  # p
            return pickle.loads(body)
    except StateDecodeError:
        raise
    except Exception as exc:
        raise StateDecodeError(f"cannot decode state key: {type(exc).__name__}: {exc}") from exc
    raise StateDecodeError(f"cannot decode state key: unknown tag byte {tag:#04x}")


def _decode_tuple(body: bytes) -> tuple[Any, ...]:
    items: list[Any] = []
    position = 0
    while position < len(body):
        (length,) = _LENGTH.unpack_from(body, position)
        position += _LENGTH.size
        if position + length > len(body):
            raise StateDecodeError("cannot decode state key: truncated tuple")
        items.append(decode_key(body[position : position + length]))
        position += length
    return tuple(items)


def _model_class(path: str) -> type[BaseModel]:
    module_name, _, qualname = path.partition(":")
    module = sys.modules.get(module_name) or importlib.import_module(module_name)
    found: Any = module
    for part in qualname.split("."):
        found = getattr(found, part)
    if not (isinstance(found, type) and issubclass(found, BaseModel)):
        raise StateDecodeError(f"{path} is not a pydantic model class")
    return found


def encode_value(value: Any) -> bytes:
    return pickle.dumps(value, protocol=_PICKLE_PROTOCOL)


def decode_value(data: bytes) -> Any:
    try:
        return pickle.loads(data)
    except Exception as exc:
        raise StateDecodeError(f"cannot decode state value: {type(exc).__name__}: {exc}") from exc


@dataclass(frozen=True, slots=True)
class Position:
    """What the state written before this marker reflects, for one input partition.

    ``offset``: the next input offset not yet applied (records below it are in the state, so a
    replay after a crash must skip them). ``watermark`` and ``event_times`` (the largest event time
    seen per watermark input: the upstream partitions of a repartitioned input, or 0) rebuild the
    watermark, so records that were late before a crash stay late after it. ``origins``: for input
    read from a repartition topic, per upstream partition the largest ``(offset, sequence)`` applied,
    so copies of records an upstream wrote twice are skipped too.
    """

    offset: int
    watermark: float = -math.inf
    event_times: dict[int, float] = field(default_factory=dict)
    origins: dict[int, tuple[int, int]] = field(default_factory=dict)


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


def encode_position(position: Position) -> bytes:
    return pydantic_core.to_json(
        {
            "offset": position.offset,
            "watermark": _finite_or_none(position.watermark),
            "event_times": {str(p): _finite_or_none(t) for p, t in position.event_times.items()},
            "origins": {str(p): [o, s] for p, (o, s) in position.origins.items()},
        }
    )


def decode_position(data: bytes) -> Position:
    try:
        raw = pydantic_core.from_json(data)
        watermark = raw.get("watermark")
        return Position(
            offset=int(raw["offset"]),
            watermark=-math.inf if watermark is None else float(watermark),
            event_times={
                int(p): -math.inf if t is None else float(t)
                for p, t in (raw.get("event_times") or {}).items()
            },
            origins={int(p): (int(o), int(s)) for p, (o, s) in (raw.get("origins") or {}).items()},
        )
    except Exception as exc:
        raise StateDecodeError(f"cannot decode changelog position: {type(exc).__name__}: {exc}") from exc
