"""How records look on topics the worker writes: sink keys, window results, repartition records.

Sink keys (read by anyone): ``None`` stays absent, ``bytes`` are written as they are, ``str`` as
UTF-8, anything else as JSON (a pydantic model as its JSON object).

Window results: the record key is the group key (encoded as above) and the value is the JSON object
``{"key": <group key>, "window_start": <s>, "window_end": <s>, "value": <aggregate>}`` with window
bounds in float seconds of event time (``[start, end)``, or ``[start, end]`` for sliding windows) and
bytes inside the JSON base64-encoded. Steps between the window and the sink (a ``map`` of the count,
say) see only the aggregate; the window rides along beside the value and the sink wraps it at the end.

Repartition records (read only by cadenza workers running the same pipelines): the key is the new key
in the deterministic state-key encoding (equal keys, equal bytes, same partition). The value is what
a user function returned, in the safe encoding of :mod:`cadenza.state.safe_codec` (first byte ``v``):
None, bool, int, float, str, bytes, list, tuple, dict and pydantic models (class path plus round-trip
JSON, validated back into the model on the other side, so a model's validators run again after a
repartition, as they would for any consumer of a topic of that model). Anything else is refused when
encoded (the record goes to the dead-letter topic, naming the type and the step). A model is decoded
only if its class is in the codec's allow-list (the models of the loaded pipelines and those this
worker produced), and nothing is ever unpickled: values tagged ``p`` (pickles, as older versions
wrote them) are refused, as is any other unknown tag. Values tagged ``m`` (``m<module>:<class>\0<JSON>``,
the model form older versions wrote) are still read, with the same allow-list. There is one header,
``cadenza-origin``, packs (big-endian) the upstream input partition (int32), the upstream input
offset (int64), the record's sequence number among the records that input produced to this topic
(int32) and the event time (double; 0.0 when no window downstream needs it). The origin lets the
window downstream recognise the copies a crashed upstream writes again when it replays, which
at-least-once repartitioning produces: per upstream partition, origins only grow.

Progress records (written to every partition of a repartition topic whose reader needs event time):
no key, no value, and one header, ``cadenza-progress``, packing the upstream input partition (int32)
and the largest event time (double) among the records that partition has had written to the topic
so far. They are written after those records, by the same producer, so a reader that gets one has
already got every record it covers; they let a downstream watermark move for an upstream partition
that sends this partition nothing (see ``docs/concepts/watermarks.md``). The decoder turns one into a unit
whose origin has offset and sequence ``-1`` (:func:`is_progress`); it skips the steps before the
stateful ones and is never decoded, dead-lettered or counted as a record.
"""

from __future__ import annotations

import math
import struct
from typing import Any

import pydantic_core

from cadenza.operators import Window
from cadenza.schemas import DecodeError, EncodeError
from cadenza.state.safe_codec import FORMAT, dumps, loads, resolve_model

__all__ = [
    "ORIGIN_HEADER",
    "PROGRESS_HEADER",
    "Origin",
    "decode_record_value",
    "encode_record_value",
    "encode_sink_key",
    "encode_window_result",
    "is_progress",
    "pack_origin",
    "pack_progress",
    "result_event_time",
    "unpack_origin",
    "unpack_progress",
]

ORIGIN_HEADER = "cadenza-origin"

#: (upstream partition, upstream offset, sequence number, event time)
Origin = tuple[int, int, int, float]

_ORIGIN = struct.Struct(">iqid")
pack_origin = _ORIGIN.pack


def unpack_origin(data: bytes) -> Origin:
    origin: Origin = _ORIGIN.unpack(data)
    return origin


PROGRESS_HEADER = "cadenza-progress"

_PROGRESS = struct.Struct(">id")


def pack_progress(upstream: int, event_time: float) -> bytes:
    return _PROGRESS.pack(upstream, event_time)


def unpack_progress(data: bytes) -> tuple[int, float]:
    """``(upstream partition, event time)``; raises :class:`DecodeError` on anything else."""
    try:
        upstream, event_time = _PROGRESS.unpack(data)
    except struct.error as exc:
        raise DecodeError(f"malformed {PROGRESS_HEADER} header: {exc}", error_type="Malformed") from exc
    if upstream < 0 or event_time - event_time != 0.0:
        raise DecodeError(
            f"malformed {PROGRESS_HEADER} header: partition {upstream}, event time {event_time}",
            error_type="Malformed",
        )
    return upstream, float(event_time)


def is_progress(origin: Origin | None) -> bool:
    """Whether a unit with this origin is a progress record rather than a record (see above)."""
    return origin is not None and origin[1] < 0


def encode_record_value(value: Any) -> bytes:
    """A record value for a repartition topic (see the module docstring); raises
    :class:`~cadenza.state.safe_codec.UnsupportedValueError` for a value it cannot carry."""
    return dumps(value)


def decode_record_value(data: bytes) -> Any:
    """The value :func:`encode_record_value` encoded; raises :class:`DecodeError` on anything else."""
    tag = data[:1]
    if tag == FORMAT:
        return loads(data)
    if tag == b"m":  # a model as older versions wrote it
        split = data.find(b"\0")
        if split < 0:
            raise DecodeError("malformed repartition model value (no class path end)", error_type="Malformed")
        model = resolve_model(data[1:split])
        try:
            return model.__pydantic_validator__.validate_json(data[split + 1 :])
        except Exception as exc:
            raise DecodeError(f"invalid {model.__name__}: {exc}", error_type=type(exc).__name__) from exc
    if tag == b"p":
        raise DecodeError(
            "refusing a pickled repartition value (written by an older cadenza, or crafted): unpickling "
            "data read from Kafka would let whoever can write to the topic run code in the worker",
            error_type="PickleRefused",
        )
    raise DecodeError(f"not a cadenza repartition value (first byte {tag!r})", error_type="UnknownFormat")


def encode_sink_key(key: Any) -> bytes | None:
    if key is None:
        return None
    kind = type(key)
    if kind is bytes:
        return key  # type: ignore[no-any-return]
    if kind is str:
        return key.encode()  # type: ignore[no-any-return]
    try:
        return pydantic_core.to_json(key, bytes_mode="base64", inf_nan_mode="null")
    except Exception as exc:
        raise EncodeError(
            f"cannot encode key of type {kind.__name__} as JSON: {exc}", error_type=type(exc).__name__
        ) from exc


def encode_window_result(key: Any, window: Window, value: Any) -> bytes:
    try:
        return pydantic_core.to_json(
            {"key": key, "window_start": window.start, "window_end": window.end, "value": value},
            bytes_mode="base64",
            inf_nan_mode="null",  # NaN (from a user aggregation, say) is not JSON
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
