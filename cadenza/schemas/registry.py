"""Avro values in the Confluent Schema Registry wire format.

Frame: magic byte ``0``, the schema id as a 4-byte big-endian integer, then the schemaless Avro body.
This is what Kafka Connect, ksqlDB and every Confluent serializer read and write, so a cadenza topic
in this format is usable by the rest of a Confluent estate.

The codec talks to the registry only twice in its life per schema: once to register (or look up) its
own schema id, on the first encode; and once per unseen writer schema id on decode, whose parsed
schema is then cached. Records written with an older or newer compatible schema are resolved into the
codec's model by Avro schema resolution.

The client is ``confluent_kafka.schema_registry.SchemaRegistryClient`` (which needs the
``confluent-kafka[schemaregistry]`` extra) or anything with the same ``register_schema`` /
``get_schema`` (and, with ``auto_register=False``, ``lookup_schema``) methods.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from fastavro import parse_schema
from pydantic import BaseModel

from cadenza.errors import ConfigError
from cadenza.schemas.avro_schema import DEFAULT_NAMESPACE
from cadenza.schemas.codecs import AvroBody, Headers, Reader, _Sink, reader_for, schema_fingerprint
from cadenza.schemas.errors import DecodeError

__all__ = ["MAGIC_BYTE", "RegistryAvroCodec", "RegistrySchema", "SchemaRegistryLike"]

MAGIC_BYTE = 0
_HEADER_SIZE = 5
#: Unknown schema ids remembered so a stream of garbage does not query the registry per record.
_MAX_UNKNOWN_IDS = 1024

M = TypeVar("M", bound=BaseModel)


class SchemaRegistryLike(Protocol):
    """The part of ``SchemaRegistryClient`` this codec calls (so tests can pass an in-memory fake)."""

    def register_schema(self, subject_name: str, schema: Any, normalize_schemas: bool = False) -> int: ...

    def get_schema(self, schema_id: int, subject_name: str | None = None, fmt: str | None = None) -> Any: ...


@dataclass(frozen=True, slots=True)
class RegistrySchema:
    """Stand-in for ``confluent_kafka.schema_registry.Schema`` when the registry extra is missing.

    Only used when that package cannot be imported, in which case the client cannot be Confluent's
    either; it carries the same attributes a client reads.
    """

    schema_str: str
    schema_type: str = "AVRO"
    references: list[Any] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"schema": self.schema_str, "schemaType": self.schema_type, "references": []}


def _schema_object(schema_str: str) -> Any:
    try:
        # Imported late: an optional extra, and a heavy import only registry users should pay for.
        from confluent_kafka.schema_registry import Schema  # noqa: PLC0415
    except ImportError:
        return RegistrySchema(schema_str)
    schema_class: Any = Schema  # an attrs class: its __init__ is generated, mypy cannot see it
    return schema_class(schema_str, "AVRO")


class RegistryAvroCodec(Generic[M]):
    """Avro values framed with a Schema Registry id; ``decode`` resolves other writer schemas."""

    __slots__ = (
        "_auto_register",
        "_body",
        "_client",
        "_prefix",
        "_schema_id",
        "_schema_str",
        "_subject",
        "_unknown",
        "_writers",
    )

    def __init__(
        self,
        model: type[M],
        client: SchemaRegistryLike,
        subject: str,
        *,
        namespace: str = DEFAULT_NAMESPACE,
        auto_register: bool = True,
    ) -> None:
        if not subject:
            raise ConfigError("a Schema Registry codec needs a subject, e.g. '<topic>-value'")
        self._body = AvroBody(model, namespace=namespace)
        self._client = client
        self._subject = subject
        self._auto_register = auto_register
        self._schema_str = json.dumps(self._body.schema, separators=(",", ":"))
        self._schema_id: int | None = None
        self._prefix = b""
        # schema id -> (parsed writer schema, its reader), or (None, None) when it is ours
        self._writers: dict[int, tuple[Any, Reader]] = {}
        self._unknown: set[int] = set()

    @property
    def model(self) -> type[M]:
        return self._body.model

    @property
    def subject(self) -> str:
        return self._subject

    @property
    def schema(self) -> dict[str, Any]:
        return self._body.schema

    @property
    def schema_id(self) -> int:
        """This codec's schema id, registered (or looked up) on first use and cached."""
        if self._schema_id is None:
            schema = _schema_object(self._schema_str)
            if self._auto_register:
                schema_id = int(self._client.register_schema(self._subject, schema))
            else:
                lookup = getattr(self._client, "lookup_schema", None)
                if lookup is None:
                    raise ConfigError("auto_register=False needs a client with lookup_schema()")
                schema_id = int(lookup(self._subject, schema).schema_id)
            if not 0 <= schema_id < 2**32:
                raise ConfigError(f"Schema Registry returned id {schema_id}, which does not fit 4 bytes")
            self._schema_id = schema_id
            self._prefix = bytes((MAGIC_BYTE,)) + schema_id.to_bytes(4, "big")
            self._writers[schema_id] = (None, None)
        return self._schema_id

    def encode(self, value: M) -> bytes:
        if self._schema_id is None:
            self.schema_id  # noqa: B018 - registers once
        sink = _Sink()
        sink.write(self._prefix)
        self._body.write(value, sink)
        return b"".join(sink.parts)

    def decode(self, data: bytes, headers: Headers | None = None) -> M:
        if len(data) < _HEADER_SIZE:
            raise DecodeError(
                f"not a Schema Registry frame: {len(data)} bytes, the header alone takes {_HEADER_SIZE}",
                error_type="ShortFrame",
            )
        if data[0] != MAGIC_BYTE:
            raise DecodeError(
                f"not a Schema Registry frame: magic byte is {data[0]}, expected {MAGIC_BYTE}",
                error_type="BadMagicByte",
            )
        schema_id = int.from_bytes(data[1:_HEADER_SIZE], "big")
        writer = self._writers.get(schema_id)
        if writer is None:
            writer = self._writer_schema(schema_id)
        return self._body.read(data, _HEADER_SIZE, writer[0], writer[1])

    def _writer_schema(self, schema_id: int) -> tuple[Any, Reader]:
        """Fetch, parse and cache the writer schema of ``schema_id`` (``(None, None)`` when it is ours).

        A registry that answers "no such schema" makes the record undecodable (``DecodeError``); any
        other failure (network, auth) propagates unchanged, because the record itself may be fine and
        must not be dead-lettered for an outage.
        """
        if schema_id in self._unknown:
            raise DecodeError(
                f"schema id {schema_id} is unknown to the Schema Registry", error_type="UnknownSchema"
            )
        try:
            registered = self._client.get_schema(schema_id)
        except Exception as exc:
            if getattr(exc, "http_status_code", None) != 404:
                raise
            if len(self._unknown) >= _MAX_UNKNOWN_IDS:
                self._unknown.clear()
            self._unknown.add(schema_id)
            raise DecodeError(
                f"schema id {schema_id} is not in the Schema Registry: {exc}", error_type="UnknownSchema"
            ) from exc
        schema_type = getattr(registered, "schema_type", "AVRO") or "AVRO"
        if schema_type != "AVRO":
            raise DecodeError(
                f"schema id {schema_id} is a {schema_type} schema, this codec reads Avro",
                error_type="SchemaTypeMismatch",
            )
        if getattr(registered, "references", None):
            raise DecodeError(
                f"schema id {schema_id} uses schema references, which this codec does not resolve",
                error_type="UnsupportedSchema",
            )
        try:
            parsed = parse_schema(json.loads(registered.schema_str))
            same = schema_fingerprint(parsed) == self._body.fingerprint
        except Exception as exc:
            raise DecodeError(
                f"schema id {schema_id} is not a valid Avro schema: {type(exc).__name__}: {exc}",
                error_type=type(exc).__name__,
            ) from exc
        writer = (None, None) if same else (parsed, reader_for(parsed))
        self._writers[schema_id] = writer
        return writer

    def headers(self) -> list[tuple[str, bytes]]:
        return []  # the schema id travels in the value frame
