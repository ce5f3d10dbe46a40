"""Schemaless Avro for records whose contract is an ``.avsc`` file in ``cadenza/schemas``.

Spans and feedback statistics cross a language boundary (the Spark stats job reads spans and writes
feedback), so the schema file, not a Python class, is the contract: the file is what this codec
parses. Conventions follow :class:`cadenza.schemas.AvroCodec` so tools treat both alike: the writer
schema's CRC-64-AVRO fingerprint travels in the ``cadenza-schema-fp`` header, a record carrying
another fingerprint is refused instead of misread, and every decoding failure is a
:class:`~cadenza.schemas.DecodeError`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from importlib.resources import files
from io import BytesIO
from typing import Any

from fastavro import parse_schema, schemaless_reader, schemaless_writer

from cadenza.infra.kafka.headers import AnyHeaders, get_header
from cadenza.schemas.codecs import SCHEMA_FP_HEADER, schema_fingerprint
from cadenza.schemas.errors import DecodeError, EncodeError

__all__ = ["AvscCodec", "epoch_seconds", "load_avsc", "to_micros"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_US = timedelta(microseconds=1)
_US = 1_000_000


def to_micros(seconds: float) -> int:
    """Epoch seconds as the integer microseconds of a ``timestamp-micros`` field."""
    if not math.isfinite(seconds):
        raise ValueError(f"a timestamp must be finite, got {seconds!r}")
    return round(seconds * _US)


def epoch_seconds(value: datetime | int) -> float:
    """A decoded ``timestamp-micros`` field (fastavro gives an aware datetime) as epoch seconds.

    Goes through integer microseconds, so a value written with :func:`to_micros` reads back exactly.
    """
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return ((value - _EPOCH) // _ONE_US) / _US
    return int(value) / _US


def load_avsc(filename: str) -> dict[str, Any]:
    """The schema in ``cadenza/schemas/<filename>`` as a dict (shipped as package data)."""
    text = files("cadenza.schemas").joinpath(filename).read_text(encoding="utf-8")
    schema = json.loads(text)
    if not isinstance(schema, dict):
        raise ValueError(f"cadenza/schemas/{filename} is not an Avro record schema")
    return schema


class AvscCodec:
    """Encode dicts to, and decode them from, schemaless Avro bodies of one ``.avsc`` schema.

    Stateless after construction, so one instance is shared by every thread.
    """

    __slots__ = ("_headers", "_name", "fingerprint", "parsed", "schema")

    def __init__(self, filename: str) -> None:
        self.schema: dict[str, Any] = load_avsc(filename)
        self.parsed: Any = parse_schema(self.schema)
        self.fingerprint: bytes = schema_fingerprint(self.parsed)
        self._headers: tuple[tuple[str, bytes], ...] = ((SCHEMA_FP_HEADER, self.fingerprint),)
        self._name = str(self.schema.get("name", filename))

    def headers(self) -> list[tuple[str, bytes]]:
        """Headers to attach to every record written with this codec (a fresh list)."""
        return list(self._headers)

    def encode(self, record: Mapping[str, Any]) -> bytes:
        buffer = BytesIO()
        try:
            schemaless_writer(buffer, self.parsed, record)
        except Exception as exc:
            raise EncodeError(
                f"cannot encode {self._name}: {type(exc).__name__}: {exc}", error_type=type(exc).__name__
            ) from exc
        return buffer.getvalue()

    def decode(self, data: bytes | None, headers: AnyHeaders = None) -> dict[str, Any]:
        """The record in ``data``; raises :class:`DecodeError` (and nothing else) for bad input.

        Records without the fingerprint header are read on trust, so writers other than cadenza's
        (the Spark job) need not add it; a header naming another schema is refused.
        """
        try:
            writer_fp = get_header(headers, SCHEMA_FP_HEADER)
        except Exception as exc:  # headers come off the network too
            raise DecodeError(f"unreadable {self._name} headers: {exc}", error_type="BadHeaders") from exc
        if writer_fp is not None and writer_fp != self.fingerprint:
            raise DecodeError(
                f"{self._name} written with another schema: {SCHEMA_FP_HEADER} is {writer_fp.hex()}, "
                f"expected {self.fingerprint.hex()}",
                error_type="SchemaMismatch",
            )
        if not isinstance(data, bytes | bytearray | memoryview):
            raise DecodeError(f"no {self._name} value (got {type(data).__name__})", error_type="NoValue")
        try:
            stream = BytesIO(data)
            record = schemaless_reader(stream, self.parsed, None)
            consumed = stream.tell()
        except Exception as exc:
            raise DecodeError(
                f"invalid {self._name} body: {type(exc).__name__}: {exc}", error_type=type(exc).__name__
            ) from exc
        if consumed != len(data):
            raise DecodeError(
                f"invalid {self._name} body: {len(data) - consumed} trailing bytes after the record",
                error_type="TrailingBytes",
            )
        if not isinstance(record, dict):
            raise DecodeError(f"invalid {self._name} body: not a record", error_type="TypeError")
        return record
