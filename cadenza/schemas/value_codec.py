"""The value-codec protocol: what ``source(..., codec=...)`` and ``sink(..., codec=...)`` accept.

A codec turns a record's value bytes into a value and back. It is not bound to a topic or a model:
the worker hands ``decode`` the source's declared model (or ``None`` for a raw source), so one codec
object can serve every topic of a pipeline. JSON, Avro and Schema Registry Avro are built-in codecs
(:mod:`cadenza.schemas.formats`); ``format="json"`` and ``format="avro"`` are shorthands for them.

This module imports nothing heavy, so declaring a pipeline does not load a codec library.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel

from cadenza.schemas.codecs import _decode_error, _encode_error
from cadenza.schemas.errors import DecodeError, EncodeError

__all__ = ["Codec", "codec_problem", "decode_with", "encode_with"]


@runtime_checkable
class Codec(Protocol):
    """A record value format.

    ``decode`` gets the declared value model (``None`` for a raw source) and the record headers; it
    may return an instance of the model, or plain data the worker then validates into the model (so a
    codec of dicts, such as msgpack, needs no model code). Anything it raises dead-letters the record
    with the codec's name and the error as the reason. ``encode`` gets whatever reaches the sink (a
    model, a dict, a number; for window results the ``{"key", "window_start", "window_end", "value"}``
    envelope); anything it raises dead-letters the record. ``name`` is shown by ``cadenza describe``.
    """

    @property
    def name(self) -> str: ...

    def decode(
        self,
        data: bytes,
        model: type[BaseModel] | None,
        headers: Sequence[tuple[str, bytes | str | None]] | None = None,
    ) -> Any: ...

    def encode(self, value: Any) -> bytes: ...


def codec_problem(codec: object) -> str | None:
    """Why ``codec`` cannot serve as a :class:`Codec`, or ``None`` when it can."""
    missing = [attr for attr in ("decode", "encode") if not callable(getattr(codec, attr, None))]
    name = getattr(codec, "name", None)
    if not isinstance(name, str) or not name:
        missing.append("name (a non-empty str)")
    if missing:
        return (
            f"codec must implement the value-codec protocol (name, decode(data, model, headers), "
            f"encode(value)); {codec!r} lacks {', '.join(missing)}"
        )
    return None


def decode_with(
    codec: Codec,
    data: bytes,
    model: type[BaseModel] | None,
    headers: Sequence[tuple[str, bytes | str | None]] | None = None,
) -> Any:
    """``codec.decode``, validated into ``model``; whatever fails is a :class:`DecodeError` naming the
    codec, so the dead letter says which codec refused what."""
    stage = "cannot decode the value"
    try:
        value = codec.decode(data, model, headers)
        if model is None or isinstance(value, model):
            return value
        stage = f"decoded a value that is not a valid {model.__qualname__}"
        return model.model_validate(value)
    except DecodeError:
        raise
    except Exception as exc:
        raise _decode_error(f"codec {codec.name!r} {stage}", exc) from exc


def encode_with(codec: Codec, value: Any) -> bytes:
    """``codec.encode``, checked to return bytes; whatever fails is an :class:`EncodeError`."""
    try:
        data = codec.encode(value)
    except EncodeError:
        raise
    except Exception as exc:
        raise _encode_error(f"codec {codec.name!r} cannot encode {type(value).__name__}", exc) from exc
    if not isinstance(data, bytes | bytearray | memoryview):
        raise EncodeError(
            f"codec {codec.name!r} returned {type(data).__name__} from encode(); it must return bytes",
            error_type="TypeError",
        )
    return bytes(data)
