"""Value codecs: pydantic models to record bytes and back, as JSON or schemaless Avro.

A codec is built once per topic (schemas parsed, fingerprints computed, converters compiled), so the
per-record calls do the least work possible: one dump, one write; or one read, one validation.

Every decoding failure, whatever raised it underneath (fastavro, pydantic, the JSON parser, a bad
header), leaves a codec as :class:`~cadenza.schemas.errors.DecodeError`, which the worker routes to a
dead-letter topic. Encoding failures become :class:`~cadenza.schemas.errors.EncodeError`.
"""

from __future__ import annotations

from collections.abc import Sequence
from io import BytesIO
from typing import IO, TYPE_CHECKING, Any, Generic, Literal, Protocol, TypeVar, cast, overload

import pydantic_core
from fastavro import parse_schema, schemaless_reader, schemaless_writer
from fastavro.schema import fingerprint, to_parsing_canonical_form
from pydantic import BaseModel

from cadenza.errors import ConfigError
from cadenza.schemas.avro_schema import DEFAULT_NAMESPACE, Converter, avro_mapping
from cadenza.schemas.errors import DecodeError, EncodeError

if TYPE_CHECKING:
    from cadenza.schemas.registry import SchemaRegistryLike

try:
    # fastavro's compiled reader recurses on the C stack: a hostile record nesting a recursive type
    # a few thousand levels deep crashes the process. Its pure-Python twin stops at the interpreter's
    # recursion limit instead (a RecursionError, hence a DecodeError); schemas that can nest use it.
    from fastavro._read_py import schemaless_reader as _guarded_reader
except ImportError:  # pragma: no cover - present in every fastavro release with the Cython reader
    _guarded_reader = schemaless_reader

__all__ = [
    "SCHEMA_FP_HEADER",
    "AvroCodec",
    "Headers",
    "JsonCodec",
    "ValueCodec",
    "codec_for",
    "schema_fingerprint",
]

#: Header carrying the 8-byte CRC-64-AVRO fingerprint of the writer's schema (little-endian, as in
#: Avro's single-object encoding), so a reader can tell "bytes of another schema" from "garbage".
SCHEMA_FP_HEADER = "cadenza-schema-fp"

#: Record headers as confluent-kafka hands them over (``Message.headers()``).
Headers = Sequence[tuple[str, bytes | str | None]]

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)


class ValueCodec(Protocol[T]):
    """What the worker needs from a value format; JSON, Avro and Registry-Avro codecs implement it."""

    def encode(self, value: T) -> bytes:
        """The record value bytes of ``value``; raises ``EncodeError``."""
        ...

    def decode(self, data: bytes, headers: Headers | None = None) -> T:
        """The value in ``data``; raises ``DecodeError`` and nothing else for bad input."""
        ...

    def headers(self) -> list[tuple[str, bytes]]:
        """Headers to attach to every record this codec encodes (a fresh list the caller may extend)."""
        ...


def _decode_error(what: str, exc: BaseException) -> DecodeError:
    return DecodeError(f"{what}: {type(exc).__name__}: {exc}", error_type=type(exc).__name__)


def _encode_error(what: str, exc: BaseException) -> EncodeError:
    return EncodeError(f"{what}: {type(exc).__name__}: {exc}", error_type=type(exc).__name__)


class JsonCodec(Generic[T]):
    """UTF-8 JSON via pydantic's Rust serializer; without a model, any JSON object as a ``dict``.

    Field names follow the model's aliases in both directions (``by_alias``), which is also what the
    Avro schema uses. ``bytes`` fields follow the model's ``ser_json_bytes`` setting: pydantic's
    default ('utf8') cannot carry arbitrary binary, so set ``ser_json_bytes='base64'`` and
    ``val_json_bytes='base64'`` on models that hold binary data.
    """

    __slots__ = ("_model", "_what")

    @overload
    def __init__(self: JsonCodec[M], model: type[M]) -> None: ...
    @overload
    def __init__(self: JsonCodec[dict[str, Any]], model: None = None) -> None: ...
    def __init__(self, model: type[BaseModel] | None = None) -> None:
        if model is not None and not (isinstance(model, type) and issubclass(model, BaseModel)):
            raise ConfigError(f"JsonCodec needs a pydantic model class or None, got {model!r}")
        self._model = model
        self._what = f"JSON {model.__qualname__}" if model is not None else "JSON object"

    @property
    def model(self) -> type[BaseModel] | None:
        return self._model

    def encode(self, value: T) -> bytes:
        try:
            if isinstance(value, BaseModel):
                return value.__pydantic_serializer__.to_json(value, by_alias=True)
            # NaN and infinity are not JSON: null, as pydantic writes them for a model's float fields.
            return pydantic_core.to_json(value, inf_nan_mode="null")
        except Exception as exc:
            raise _encode_error(f"cannot encode {type(value).__name__} as {self._what}", exc) from exc

    def decode(self, data: bytes, headers: Headers | None = None) -> T:
        model = self._model
        try:
            if model is not None:
                return model.model_validate_json(data)  # type: ignore[return-value]
            value = pydantic_core.from_json(data)
        except Exception as exc:
            raise _decode_error(f"invalid {self._what}", exc) from exc
        if not isinstance(value, dict):
            raise DecodeError(
                f"invalid {self._what}: expected a JSON object, got {type(value).__name__}",
                error_type="TypeError",
            )
        return value  # type: ignore[return-value]

    def headers(self) -> list[tuple[str, bytes]]:
        return []


def schema_fingerprint(schema: dict[str, Any] | list[Any] | str) -> bytes:
    """The 8-byte CRC-64-AVRO (Rabin) fingerprint of the schema's parsing canonical form.

    Byte order is fastavro's and Java's: little-endian, the order Avro single-object encoding uses.
    """
    return bytes.fromhex(fingerprint(to_parsing_canonical_form(schema), "CRC-64-AVRO"))


Reader = Any  # fastavro's schemaless_reader signature


def is_recursive(schema: Any) -> bool:
    """Whether a (parsed) schema has a named type that contains itself, so data can nest without bound."""

    def walk(node: Any, open_names: frozenset[str]) -> bool:
        if isinstance(node, str):
            return node in open_names
        if isinstance(node, list):
            return any(walk(branch, open_names) for branch in node)
        if not isinstance(node, dict):
            return False
        kind = node.get("type")
        if kind in ("record", "error"):
            inner = open_names | {str(node.get("name"))}
            return any(walk(f.get("type"), inner) for f in node.get("fields", ()))
        if kind == "array":
            return walk(node.get("items"), open_names)
        if kind == "map":
            return walk(node.get("values"), open_names)
        if kind in ("enum", "fixed"):
            return False
        return walk(kind, open_names)

    return walk(schema, frozenset())


def reader_for(parsed_schema: Any) -> Reader:
    """The fastavro reader safe for data written with ``parsed_schema``."""
    return _guarded_reader if is_recursive(parsed_schema) else schemaless_reader


class _Sink:
    """A write-only buffer: fastavro hands its whole encoded buffer to ``write`` in one call."""

    __slots__ = ("parts",)

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def write(self, data: bytes) -> int:
        self.parts.append(data)
        return len(data)

    def getvalue(self) -> bytes:
        parts = self.parts
        return bytes(parts[0]) if len(parts) == 1 else b"".join(parts)


class AvroBody(Generic[M]):
    """Schemaless Avro bodies of one model: the part shared by the plain and the Registry codec."""

    __slots__ = ("_from_avro", "_model", "_parsed", "_reader", "_to_avro", "_what", "fingerprint", "schema")

    def __init__(self, model: type[M], *, namespace: str = DEFAULT_NAMESPACE) -> None:
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            raise ConfigError(f"an Avro codec needs a pydantic model class, got {model!r}")
        mapping = avro_mapping(model, namespace=namespace)
        self._model = model
        self.schema: dict[str, Any] = mapping.schema
        self._parsed: Any = parse_schema(mapping.schema)
        self._reader: Reader = reader_for(self._parsed)
        self._to_avro: Converter | None = mapping.to_avro
        self._from_avro: Converter | None = mapping.from_avro
        self.fingerprint: bytes = schema_fingerprint(self._parsed)
        self._what = f"Avro {model.__qualname__}"

    @property
    def model(self) -> type[M]:
        return self._model

    @property
    def parsed_schema(self) -> Any:
        return self._parsed

    def write(self, value: M, sink: _Sink) -> None:
        try:
            record = value.model_dump(by_alias=True)
            if self._to_avro is not None:
                record = self._to_avro(record)
            schemaless_writer(cast(IO[bytes], sink), self._parsed, record)
        except Exception as exc:
            raise _encode_error(f"cannot encode {type(value).__name__} as {self._what}", exc) from exc

    def read(self, data: bytes, start: int = 0, writer_schema: Any = None, reader: Reader = None) -> M:
        """Read the body at ``data[start:]``.

        ``writer_schema`` (parsed) and its ``reader`` (from :func:`reader_for`) are given when the
        data was written with another schema, which is then resolved into ours.
        """
        try:
            stream = BytesIO(data)
            if start:
                stream.seek(start)
            if writer_schema is None:
                record = self._reader(stream, self._parsed, None)
            else:
                record = reader(stream, writer_schema, self._parsed)
            consumed = stream.tell()
        except Exception as exc:
            raise _decode_error(f"invalid {self._what} body", exc) from exc
        if consumed != len(data):
            raise DecodeError(
                f"invalid {self._what} body: {len(data) - consumed} trailing bytes after the record",
                error_type="TrailingBytes",
            )
        try:
            if self._from_avro is not None:
                record = self._from_avro(record)
            return self._model.model_validate(record)
        except Exception as exc:
            raise _decode_error(f"invalid {self._what}", exc) from exc


class AvroCodec(Generic[M]):
    """Schemaless Avro bodies, with the writer schema's fingerprint in the ``cadenza-schema-fp`` header.

    The fingerprint lets a reader refuse bytes written with another schema instead of misreading them
    (Avro bodies carry no type information, so a mismatched read often "succeeds" with garbage).
    Records without the header are read on trust, so producers other than cadenza still work.
    """

    __slots__ = ("_body", "_headers")

    def __init__(self, model: type[M], *, namespace: str = DEFAULT_NAMESPACE) -> None:
        self._body = AvroBody(model, namespace=namespace)
        self._headers: tuple[tuple[str, bytes], ...] = ((SCHEMA_FP_HEADER, self._body.fingerprint),)

    @property
    def model(self) -> type[M]:
        return self._body.model

    @property
    def schema(self) -> dict[str, Any]:
        """The derived Avro schema (a dict); do not mutate it."""
        return self._body.schema

    @property
    def parsed_schema(self) -> Any:
        return self._body.parsed_schema

    @property
    def fingerprint(self) -> bytes:
        return self._body.fingerprint

    def encode(self, value: M) -> bytes:
        sink = _Sink()
        self._body.write(value, sink)
        return sink.getvalue()

    def decode(self, data: bytes, headers: Headers | None = None) -> M:
        if headers:
            for key, header_value in headers:
                if key == SCHEMA_FP_HEADER:
                    self._check_fingerprint(header_value)
        return self._body.read(data)

    def _check_fingerprint(self, value: bytes | str | None) -> None:
        expected = self._body.fingerprint
        if value == expected:
            return
        shown = value.hex() if isinstance(value, bytes) else repr(value)
        raise DecodeError(
            f"record written with another Avro schema: header {SCHEMA_FP_HEADER} is {shown}, this "
            f"codec's {self._body.model.__qualname__} schema has fingerprint {expected.hex()}",
            error_type="SchemaMismatch",
        )

    def headers(self) -> list[tuple[str, bytes]]:
        return list(self._headers)


def codec_for(
    format: Literal["json", "avro"],
    model: type[BaseModel] | None = None,
    registry_client: SchemaRegistryLike | None = None,
    *,
    subject: str | None = None,
    namespace: str = DEFAULT_NAMESPACE,
) -> ValueCodec[Any]:
    """The codec a topic declared with ``format`` needs.

    With a Schema Registry client, Avro values use the Confluent wire format under ``subject`` (by
    Confluent's default naming, ``"<topic>-value"``); without one, schemaless Avro plus a fingerprint
    header. JSON does not use the registry.
    """
    if format == "json":
        if registry_client is not None:
            raise ConfigError("JSON values do not use a Schema Registry; drop the registry client")
        return JsonCodec(model)
    if format == "avro":
        if model is None:
            raise ConfigError("Avro values need a pydantic model to derive the schema from")
        if registry_client is None:
            return AvroCodec(model, namespace=namespace)
        if not subject:
            raise ConfigError("a Schema Registry codec needs a subject, e.g. '<topic>-value'")
        from cadenza.schemas.registry import RegistryAvroCodec  # noqa: PLC0415 - registry imports us

        return RegistryAvroCodec(model, registry_client, subject, namespace=namespace)
    raise ConfigError(f"unknown value format {format!r}; use 'json' or 'avro'")
