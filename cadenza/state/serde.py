"""Bytes for state keys, state values and the changelog's position marker.

Keys must encode *deterministically*, equal keys to equal bytes in every process, or a compacted
changelog keeps two live records for one key and a repartition topic sends one key to two
partitions. So common key types get a fixed tagged form (``s`` str, ``i`` int, ``f`` float with
``-0.0`` folded into ``0.0``, ``b`` bytes, ``n`` None, ``t`` tuple of length-prefixed encoded items,
``m`` pydantic model as its class path plus JSON); other keys (bool, list, dict...) are written in
the safe encoding of :mod:`cadenza.state.safe_codec`, whose first byte ``v`` is their tag. Keys of
other types (sets, datetimes, arbitrary objects) are refused when encoded.

Values are written in the safe encoding too (first byte ``v``). Nothing read back is ever unpickled:
whoever can write to a changelog or repartition topic must not be able to run code in the workers. A
model key or value is decoded only if its class is in the codec's allow-list; pickled keys and values
(tag ``p``, or a pickle's ``0x80`` byte, as older versions wrote them) are refused with a clear error.

The first byte ``0x00`` is reserved for cadenza's own records in a changelog (the position marker),
so they can never collide with an encoded key.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field
from typing import Any

import pydantic_core
from pydantic import BaseModel

from cadenza.errors import CadenzaError
from cadenza.state.safe_codec import FORMAT, SafeDecodeError, dumps, loads, model_path, resolve_model

__all__ = [
    "FENCE_KEY",
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
#: Changelog key of the fence an old owner writes when it hands a partition over (value: the move's
#: epoch): everything it wrote for the partition comes before it, so the new owner's warm copy is
#: complete once it has read the fence (see :mod:`cadenza.scaling.ownership`).
FENCE_KEY = b"\x00cadenza-fence"

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
        return b"m" + model_path(kind) + b"\x00" + key.__pydantic_serializer__.to_json(key)
    return dumps(key)  # starts with FORMAT (``v``); raises UnsupportedValueError for other types


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
            return resolve_model(path).model_validate_json(payload)
        if tag == 0x76:  # v
            return loads(data)
        if tag == 0x70:  # p
            raise StateDecodeError(_PICKLED.format(what="state key"))
    except StateDecodeError:
        raise
    except SafeDecodeError as exc:
        raise StateDecodeError(f"cannot decode state key: {exc}") from exc
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


_PICKLED = (
    "refusing to read a pickled {what} (written by an older cadenza, or crafted): unpickling data read "
    "from Kafka would let whoever can write to the topic run code in the worker"
)


def encode_value(value: Any) -> bytes:
    """A state value in the safe encoding; raises :class:`~cadenza.state.safe_codec.UnsupportedValueError`
    (naming the type) for values it cannot carry."""
    return dumps(value)


def decode_value(data: bytes) -> Any:
    if data[:1] == b"\x80" or data[:1] == b"p":
        raise StateDecodeError(_PICKLED.format(what="state value"))
    if data[:1] != FORMAT:
        raise StateDecodeError(f"cannot decode state value: unknown format byte {data[:1]!r}")
    try:
        return loads(data)
    except SafeDecodeError as exc:
        raise StateDecodeError(f"cannot decode state value: {exc}") from exc


@dataclass(frozen=True, slots=True)
class Position:
    """What the state written before this marker reflects, for one input partition.

    ``offset``: the next input offset not yet applied (records below it are in the state, so a
    replay after a crash must skip them). ``watermark`` and ``event_times`` (the largest event time
    seen per watermark input: the upstream partitions of a repartitioned input, or 0) rebuild the
    watermark, so records that were late before a crash stay late after it. ``origins``: for input
    read from a repartition topic, per upstream partition the largest ``(offset, sequence)`` applied,
    so copies of records an upstream wrote twice are skipped too. ``inputs``: for a step reading
    several inputs (a join: 0 is the left side, 1 the right), the next offset not yet applied per
    input, since one offset cannot describe two topics; ``offset`` is then unused (-1).
    """

    offset: int
    watermark: float = -math.inf
    event_times: dict[int, float] = field(default_factory=dict)
    origins: dict[int, tuple[int, int]] = field(default_factory=dict)
    inputs: dict[int, int] = field(default_factory=dict)


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


def encode_position(position: Position) -> bytes:
    return pydantic_core.to_json(
        {
            "offset": position.offset,
            "watermark": _finite_or_none(position.watermark),
            "event_times": {str(p): _finite_or_none(t) for p, t in position.event_times.items()},
            "origins": {str(p): [o, s] for p, (o, s) in position.origins.items()},
            "inputs": {str(i): o for i, o in position.inputs.items()},
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
            inputs={int(i): int(o) for i, o in (raw.get("inputs") or {}).items()},
        )
    except Exception as exc:
        raise StateDecodeError(f"cannot decode changelog position: {type(exc).__name__}: {exc}") from exc
