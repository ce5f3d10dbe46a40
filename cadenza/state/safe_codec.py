"""A safe, deterministic, self-describing encoding for the Python values cadenza moves through Kafka.

Repartition record values and changelog state travel through topics; whoever can write to such a
topic must not be able to make a worker run code, so nothing here can build an arbitrary object (no
pickle, no imports). What it can carry:

- ``None``, ``bool``, ``int`` (any size), ``float`` (``inf`` and ``nan`` too), ``str``, ``bytes``;
- ``list``, ``tuple`` (a tuple comes back a tuple, a list a list) and ``dict`` (any supported keys,
  order preserved);
- pydantic models, as their class path and their round-trip JSON. A model is decoded only if its
  class is in the allow-list: the models the pipelines a worker loaded declare
  (:func:`register_model`, called when the worker builds its tasks) and every model class this process
  itself encoded (only code the worker already runs can produce one).

Anything else (sets, datetimes, user objects, subclasses of the built-in types) is refused when it is
*encoded*, with :class:`UnsupportedValueError` naming its type, so the mistake surfaces in the worker
that made the value. Bytes that are malformed, carry an unknown tag or name a model outside the
allow-list raise :class:`SafeDecodeError`.

Layout: a value is one tag byte and its body. Lengths and counts are 4-byte big-endian unsigned;
``i`` is a signed 64-bit big-endian int, ``I`` a length-prefixed two's-complement big-endian int for
larger ones, ``d`` an IEEE double (big-endian). Containers hold a count and then their items (a dict
alternates keys and values). ``m`` holds the length-prefixed class path (``module:qualname``) and the
length-prefixed JSON. Encoding is deterministic: the same value gives the same bytes in every process
(dicts in their insertion order). A whole encoded value (:func:`dumps`) starts with the format byte
``v``, so the format can evolve.
"""

from __future__ import annotations

import math
import struct
import sys
from collections.abc import Callable
from typing import Any, get_args, get_type_hints

from pydantic import BaseModel

from cadenza.schemas.errors import DecodeError, EncodeError

__all__ = [
    "FORMAT",
    "SafeDecodeError",
    "UnsupportedValueError",
    "allowed_models",
    "check",
    "dumps",
    "encode_model",
    "loads",
    "model_path",
    "register_function_models",
    "register_model",
    "register_models_of",
    "resolve_model",
]

#: First byte of a value written by :func:`dumps` (format version 1).
FORMAT = b"v"

_Q = struct.Struct(">q")
_D = struct.Struct(">d")
_L = struct.Struct(">I")
_q_pack = _Q.pack
_d_pack = _D.pack
_l_pack = _L.pack
_q_unpack = _Q.unpack_from
_d_unpack = _D.unpack_from
_l_unpack = _L.unpack_from
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
_NAN = _d_pack(math.nan)
_isnan = math.isnan

_VI = FORMAT + b"i"
_MODEL_PREFIXES: dict[type, bytes] = {}
_TRUE = b"T"
_FALSE = b"F"
_NONE = b"N"


class UnsupportedValueError(EncodeError):
    """A value of a type this encoding cannot carry (raised while encoding)."""

    def __init__(self, message: str, *, error_type: str = "UnsupportedValue") -> None:
        super().__init__(message, error_type=error_type)


class SafeDecodeError(DecodeError):
    """Bytes this encoding did not write, or a model class outside the allow-list."""


# -- the allow-list of model classes ---------------------------------------------------------------

_PATHS: dict[type, bytes] = {}
_ALLOWED: dict[bytes, type[BaseModel]] = {}


def model_path(kind: type[BaseModel]) -> bytes:
    """``module:qualname`` of a model class, registering the class in the allow-list."""
    path = _PATHS.get(kind)
    if path is None:
        path = f"{kind.__module__}:{kind.__qualname__}".encode()
        _ALLOWED[path] = kind
        _PATHS[kind] = path
    return path


def register_model(kind: Any) -> None:
    """Allow ``kind`` to be decoded (ignored unless it is a pydantic model class)."""
    if isinstance(kind, type) and issubclass(kind, BaseModel) and kind is not BaseModel:
        model_path(kind)


def register_models_of(annotation: Any) -> None:
    """Register every model class named in a type annotation (``list[Order] | None``, say)."""
    if isinstance(annotation, type):
        register_model(annotation)
    for arg in get_args(annotation):
        register_models_of(arg)


def register_function_models(fn: Callable[..., Any] | None) -> None:
    """Register the models a user function may emit: its return annotation's, and its module's.

    Every model class defined at the top level of the function's own module is registered too, so a
    ``map`` without a return annotation still has its output model decodable by a worker that has not
    encoded one itself yet (after a rebalance the reader is often not the writer). Those classes are
    the user's own code, already imported: nothing new is imported or run.
    """
    if fn is None:
        return
    module = sys.modules.get(getattr(fn, "__module__", "") or "")
    if module is not None:
        for value in list(vars(module).values()):
            if isinstance(value, type) and value.__module__ == module.__name__:
                register_model(value)
    try:
        hints = get_type_hints(fn)
    except Exception:  # forward references to names the function's module does not have, say
        return
    if "return" in hints:
        register_models_of(hints["return"])


def allowed_models() -> dict[bytes, type[BaseModel]]:
    """A copy of the allow-list (class path to class)."""
    return dict(_ALLOWED)


def resolve_model(path: bytes) -> type[BaseModel]:
    """The allow-listed model class at ``path``; never imports anything."""
    kind = _ALLOWED.get(path)
    if kind is None:
        raise SafeDecodeError(
            f"model class {path.decode('utf-8', 'replace')!r} is not allowed here: only the models the "
            "loaded pipelines declare, or this worker itself produced, are decoded",
            error_type="ModelNotAllowed",
        )
    return kind


def encode_model(value: BaseModel) -> bytes:
    """The round-trip JSON of a model; :class:`UnsupportedValueError` if it has none."""
    try:
        return value.__pydantic_serializer__.to_json(value, round_trip=True)
    except Exception as exc:  # e.g. bytes that are not UTF-8 under the model's JSON settings
        raise UnsupportedValueError(
            f"cannot encode {_type_name(type(value))} as JSON: {type(exc).__name__}: {exc}"
        ) from exc


# -- encoding --------------------------------------------------------------------------------------


def _type_name(kind: type) -> str:
    module = kind.__module__
    return kind.__qualname__ if module == "builtins" else f"{module}.{kind.__qualname__}"


def _encode(value: Any, out: bytearray) -> None:
    kind = type(value)
    if kind is int:
        if _INT64_MIN <= value <= _INT64_MAX:
            out += b"i"
            out += _q_pack(value)
        else:
            body = value.to_bytes((value.bit_length() + 8) // 8, "big", signed=True)
            out += b"I"
            out += _l_pack(len(body))
            out += body
    elif kind is str:
        body = value.encode("utf-8", "surrogatepass")
        out += b"s"
        out += _l_pack(len(body))
        out += body
    elif kind is float:
        out += b"d"
        out += _NAN if _isnan(value) else _d_pack(value)  # one NaN, so equal inputs give equal bytes
    elif kind is list or kind is tuple:
        out += b"l" if kind is list else b"t"
        out += _l_pack(len(value))
        for item in value:
            item_kind = type(item)
            if item_kind is float and not _isnan(item):
                out += b"d"
                out += _d_pack(item)
            elif item_kind is int and _INT64_MIN <= item <= _INT64_MAX:
                out += b"i"
                out += _q_pack(item)
            else:
                _encode(item, out)
    elif value is None:
        out += _NONE
    elif kind is bool:
        out += _TRUE if value else _FALSE
    elif kind is bytes:
        out += b"b"
        out += _l_pack(len(value))
        out += value
    elif kind is dict:
        out += b"D"
        out += _l_pack(len(value))
        for key, item in value.items():
            _encode(key, out)
            _encode(item, out)
    elif isinstance(value, BaseModel):
        path = model_path(kind)
        body = encode_model(value)
        out += b"m"
        out += _l_pack(len(path))
        out += path
        out += _l_pack(len(body))
        out += body
    else:
        raise UnsupportedValueError(
            f"cannot encode a value of type {_type_name(kind)}: cadenza carries only None, bool, int, "
            "float, str, bytes, list, tuple, dict and pydantic models between steps and in state"
        )


def dumps(value: Any) -> bytes:
    """``value`` as bytes (see the module docstring); raises :class:`UnsupportedValueError`."""
    kind = type(value)
    if kind is int and _INT64_MIN <= value <= _INT64_MAX:
        return _VI + _q_pack(value)
    if isinstance(value, BaseModel):
        prefix = _MODEL_PREFIXES.get(kind)
        if prefix is None:
            path = model_path(kind)
            prefix = _MODEL_PREFIXES[kind] = FORMAT + b"m" + _l_pack(len(path)) + path
        body = encode_model(value)
        return prefix + _l_pack(len(body)) + body
    out = bytearray(FORMAT)
    try:
        _encode(value, out)
    except RecursionError as exc:
        raise UnsupportedValueError(
            "cannot encode a value nested this deeply (or containing itself)"
        ) from exc
    return bytes(out)


_SCALARS = frozenset({int, float, str, bytes, bool, type(None)})


def check(value: Any) -> None:
    """Raise :class:`UnsupportedValueError` unless :func:`dumps` can encode ``value`` (no bytes made)."""
    kind = type(value)
    if kind in _SCALARS:
        return
    if kind is list or kind is tuple:
        for item in value:
            if type(item) not in _SCALARS:
                check(item)
    elif kind is dict:
        for key, item in value.items():
            check(key)
            check(item)
    elif isinstance(value, BaseModel):
        model_path(kind)
    else:
        dumps(value)  # raises, naming the type


# -- decoding --------------------------------------------------------------------------------------


def _sized(data: bytes, pos: int, what: str) -> tuple[int, int]:
    """Where the payload of a length-prefixed ``what`` at ``pos`` starts and ends (checked to fit)."""
    (length,) = _l_unpack(data, pos)
    pos += 4
    end = pos + length
    if end > len(data):
        raise ValueError(f"truncated {what}")
    return pos, end


def _decode(data: bytes, pos: int) -> tuple[Any, int]:
    tag = data[pos]
    pos += 1
    if tag == 0x69:  # i
        return _q_unpack(data, pos)[0], pos + 8
    if tag == 0x73:  # s
        pos, end = _sized(data, pos, "str")
        return data[pos:end].decode("utf-8", "surrogatepass"), end
    if tag == 0x64:  # d
        return _d_unpack(data, pos)[0], pos + 8
    if tag in {0x6C, 0x74}:  # l, t
        (count,) = _l_unpack(data, pos)
        pos += 4
        if count > len(data) - pos:  # every item takes at least one byte
            raise ValueError("truncated list")
        items: list[Any] = []
        append = items.append
        for _ in range(count):
            item_tag = data[pos]
            if item_tag == 0x69:  # i, inline: the common accumulator item
                append(_q_unpack(data, pos + 1)[0])
                pos += 9
            elif item_tag == 0x64:  # d
                append(_d_unpack(data, pos + 1)[0])
                pos += 9
            else:
                item, pos = _decode(data, pos)
                append(item)
        return (items if tag == 0x6C else tuple(items)), pos
    if tag == 0x4E:  # N
        return None, pos
    if tag == 0x54:  # T
        return True, pos
    if tag == 0x46:  # F
        return False, pos
    if tag == 0x62:  # b
        pos, end = _sized(data, pos, "bytes")
        return data[pos:end], end
    if tag == 0x49:  # I
        pos, end = _sized(data, pos, "int")
        return int.from_bytes(data[pos:end], "big", signed=True), end
    if tag == 0x44:  # D
        (count,) = _l_unpack(data, pos)
        pos += 4
        if 2 * count > len(data) - pos:
            raise ValueError("truncated dict")
        result: dict[Any, Any] = {}
        for _ in range(count):
            key, pos = _decode(data, pos)
            result[key], pos = _decode(data, pos)
        return result, pos
    if tag == 0x6D:  # m
        pos, end = _sized(data, pos, "model path")
        model = resolve_model(data[pos:end])
        pos, end = _sized(data, end, "model")
        return model.__pydantic_validator__.validate_json(data[pos:end]), end
    raise SafeDecodeError(f"unknown tag byte {tag:#04x} at offset {pos - 1}", error_type="UnknownTag")


def loads(data: bytes) -> Any:
    """The value :func:`dumps` encoded; raises :class:`SafeDecodeError` (and nothing else)."""
    if len(data) == 10 and data[1] == 0x69:  # vi: a small int
        return _q_unpack(data, 2)[0]
    if data[:1] != FORMAT:
        raise SafeDecodeError(
            f"not a cadenza-encoded value (format byte {data[:1]!r}, expected {FORMAT!r})",
            error_type="UnknownFormat",
        )
    try:
        value, end = _decode(data, 1)
    except SafeDecodeError:
        raise
    except Exception as exc:  # struct.error, IndexError, UnicodeDecodeError, RecursionError, ValidationError
        raise SafeDecodeError(
            f"malformed value: {type(exc).__name__}: {exc}", error_type=type(exc).__name__
        ) from exc
    if end != len(data):
        raise SafeDecodeError(f"{len(data) - end} trailing bytes after the value", error_type="TrailingBytes")
    return value
