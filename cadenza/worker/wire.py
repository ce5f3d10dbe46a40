"""How records look on topics the worker writes: sink keys, window results, repartition records.

Sink keys (read by anyone): ``None`` stays absent, ``bytes`` are written as they are, ``str`` as
UTF-8, anything else as JSON (a pydantic model as its JSON object).

Window results: the record key is the group key (encoded as above) and the value is the JSON object
``{"key": <group key>, "window_start": <s>, "window_end": <s>, "value": <aggregate>}`` with window
bounds in float seconds of event time (``[start, end)``, or ``[start, end]`` for sliding windows) and
bytes inside the JSON base64-encoded. Steps between the window and the sink (a ``map`` of the count,
say) see only the aggregate; the window rides along beside the value and the sink wraps it at the end.

Repartition records (read only by cadenza workers running the same pipelines): the key is the new key
in the deterministic state-key encoding (equal keys, equal bytes, same partition). The value is any
Python object a user function returned: a pydantic model travels as ``m<module>:<class>\0<JSON>``
(its round-trip JSON, validated back into the model on the other side: five times cheaper than a
pickle, which spends most of its time in pydantic's ``__setstate__``), anything else, or a model whose
JSON cannot be written, as ``p<pickle>``. So a model's validators run again after a repartition, as
they would for any consumer of a topic of that model. There is one header,
``cadenza-origin``, packs (big-endian) the upstream input partition (int32), the upstream input
offset (int64), the record's sequence number among the records that input produced to this topic
(int32) and the event time (double; 0.0 when no window downstream needs it). The origin lets the
window downstream recognise the copies a crashed upstream writes again when it replays, which
at-least-once repartitioning produces: per upstream partition, origins only grow.
"""

from __future__ import annotations

import importlib
import math
import pickle
import struct
import sys
from typing import Any

import pydantic_core
from pydantic import BaseModel

from cadenza.operators import Window
from cadenza.schemas import EncodeError

__all__ = [
    "ORIGIN_HEADER",
    "Origin",
    "decode_record_value",
    "encode_record_value",
    "encode_sink_key",
    "encode_window_result",
    "pack_origin",
    "result_event_time",
    "unpack_origin",
]

ORIGIN_HEADER = "cadenza-origin"

#: (upstream partition, upstream offset, sequence number, event time)
Origin = tuple[int, int, int, float]

_ORIGIN = struct.Struct(">iqid")
pack_origin = _ORIGIN.pack


def unpack_origin(data: bytes) -> Origin:
    origin: Origin = _ORIGIN.unpack(data)
    return origin


_PICKLE_PROTOCOL = pickle.HIGHEST_PROTOCOL
_MODEL_PREFIXES: dict[type, bytes] = {}
_MODEL_CLASSES: dict[bytes, type[BaseModel]] = {}


def encode_record_value(value: Any) -> bytes:
    """A record value for a repartition topic (see the module docstring)."""
    if isinstance(value, BaseModel):
        kind = type(value)
        prefix = _MODEL_PREFIXES.get(kind)
        if prefix is None:
            prefix = _MODEL_PREFIXES[kind] = f"m{kind.__module__}:{kind.__qualname__}\0".encode()
        try:
            return prefix + value.__pydantic_serializer__.to_json(value, round_trip=True)
        except Exception:  # e.g. bytes that are not UTF-8 under the model's JSON settings
            pass
    return b"p" + pickle.dumps(value, protocol=_PICKLE_PROTOCOL)


def decode_record_value(data: bytes) -> Any:
    """The value :func:`encode_record_value` encoded; raises on bytes it did not write."""
    tag = data[:1]
    if tag == b"m":
        split = data.index(b"\0")
        path = data[1:split]
        model = _MODEL_CLASSES.get(path)
        if model is None:
            model = _MODEL_CLASSES[path] = _model_class(path.decode())
        return model.__pydantic_validator__.validate_json(data[split + 1 :])
    if tag == b"p":
        return pickle.loads(data[1:])
    raise ValueError(f"not a cadenza repartition value (first byte {data[:1]!r})")


def _model_class(path: str) -> type[BaseModel]:
    module_name, _, qualname = path.partition(":")
    found: Any = sys.modules.get(module_name) or importlib.import_module(module_name)
    for part in qualname.split("."):
        found = getattr(found, part)
    if not (isinstance(found, type) and issubclass(found, BaseModel)):
        raise TypeError(f"{path} is not a pydantic model class")
    return found


def encode_sink_key(key: Any) -> bytes | None:
    if key is None:
        return None
    kind = type(key)
    if kind is bytes:
        return key  # type: ignore[no-any-return]
    if kind is str:
        return key.encode()  # type: ignore[no-any-return]
    try:
        return pydantic_core.to_json(key, bytes_mode="base64")
    except Exception as exc:
        raise EncodeError(
            f"cannot encode key of type {kind.__name__} as JSON: {exc}", error_type=type(exc).__name__
        ) from exc


def encode_window_result(key: Any, window: Window, value: Any) -> bytes:
    try:
        return pydantic_core.to_json(
            {"key": key, "window_start": window.start, "window_end": window.end, "value": value},
            bytes_mode="base64",
        )
    except Exception as exc:
        raise EncodeError(
            f"cannot encode the window result as JSON: {type(exc).__name__}: {exc}",
            error_type=type(exc).__name__,
        ) from exc


def result_event_time(window: Window, closed_end: bool) -> float:
    """The event time a window result carries downstream: the last instant inside the window.

    Not the end itself for half-open windows: a result of ``[59, 60)`` must fall into a downstream
    ``[0, 60)`` window, not the next one.
    """
    return window.end if closed_end else math.nextafter(window.end, -math.inf)
