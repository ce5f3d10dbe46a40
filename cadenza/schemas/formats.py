"""The built-in codecs: JSON, and Avro (schemaless with a fingerprint header, or Schema Registry framed).

Both implement :class:`~cadenza.schemas.value_codec.Codec`, so they can be called like a user's codec;
the worker instead asks them for a codec bound to one topic and model (:meth:`JsonFormat.bind`), made
once per topic, which keeps per-record work where it was before codecs were pluggable (and keeps the
Avro fingerprint header, which the generic ``encode`` has no way to return).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from cadenza.errors import ConfigError
from cadenza.schemas.avro_schema import DEFAULT_NAMESPACE
from cadenza.schemas.codecs import JsonCodec, ValueCodec, codec_for
from cadenza.schemas.errors import EncodeError
from cadenza.schemas.registry import SchemaRegistryLike

__all__ = ["AvroFormat", "BuiltinFormat", "JsonFormat", "builtin_format"]

_Headers = Sequence[tuple[str, bytes | str | None]]


class JsonFormat:
    """UTF-8 JSON (pydantic's serializer); ``format="json"`` is this codec."""

    __slots__ = ("_codecs", "_raw")

    name = "json"

    def __init__(self) -> None:
        self._raw: JsonCodec[dict[str, Any]] = JsonCodec()
        self._codecs: dict[type[BaseModel] | None, ValueCodec[Any]] = {None: self._raw}

    def bind(
        self, model: type[BaseModel] | None, topic: str, registry_client: SchemaRegistryLike | None = None
    ) -> ValueCodec[Any]:
        """The codec of ``topic``'s values: JSON never uses the registry, so it is ignored."""
        return codec_for("json", model)

    def decode(self, data: bytes, model: type[BaseModel] | None, headers: _Headers | None = None) -> Any:
        codec = self._codecs.get(model)
        if codec is None:
            codec = self._codecs[model] = codec_for("json", model)
        return codec.decode(data, headers)

    def encode(self, value: Any) -> bytes:
        return self._raw.encode(value)

    def __repr__(self) -> str:
        return "JsonFormat()"


class AvroFormat:
    """Avro bodies of pydantic models; ``format="avro"`` is this codec with the worker's registry.

    With ``registry_client`` (or, when it is ``None``, the worker's client from
    ``KafkaSettings.schema_registry_url``), values use the Confluent wire format under ``subject``
    (default ``"<topic>-value"``); without either, schemaless Avro plus a fingerprint header.
    """

    __slots__ = ("_codecs", "namespace", "registry_client", "subject")

    name = "avro"

    def __init__(
        self,
        *,
        registry_client: SchemaRegistryLike | None = None,
        subject: str | None = None,
        namespace: str = DEFAULT_NAMESPACE,
    ) -> None:
        if subject is not None and registry_client is None:
            raise ConfigError("AvroFormat(subject=...) needs a registry_client: a subject is a registry name")
        self.registry_client = registry_client
        self.subject = subject
        self.namespace = namespace
        self._codecs: dict[type[BaseModel], ValueCodec[Any]] = {}

    def bind(
        self, model: type[BaseModel] | None, topic: str, registry_client: SchemaRegistryLike | None = None
    ) -> ValueCodec[Any]:
        """The codec of ``topic``'s values of ``model``; this codec's own registry client wins."""
        client = self.registry_client if self.registry_client is not None else registry_client
        return codec_for(
            "avro", model, client, subject=self.subject or f"{topic}-value", namespace=self.namespace
        )

    def _codec(self, model: type[BaseModel]) -> ValueCodec[Any]:
        codec = self._codecs.get(model)
        if codec is None:
            if self.registry_client is not None and self.subject is None:
                raise ConfigError("AvroFormat used outside a pipeline with a registry needs subject=...")
            codec = self._codecs[model] = codec_for(
                "avro", model, self.registry_client, subject=self.subject, namespace=self.namespace
            )
        return codec

    def decode(self, data: bytes, model: type[BaseModel] | None, headers: _Headers | None = None) -> Any:
        if model is None:
            raise ConfigError("Avro values need a pydantic model to read with (value=Model)")
        return self._codec(model).decode(data, headers)

    def encode(self, value: Any) -> bytes:
        if not isinstance(value, BaseModel):
            raise EncodeError(
                f"Avro needs a pydantic model value; got {type(value).__name__}", error_type="TypeError"
            )
        return self._codec(type(value)).encode(value)

    def __repr__(self) -> str:
        registry = "" if self.registry_client is None else ", registry"
        return f"AvroFormat(namespace={self.namespace!r}{registry})"


BuiltinFormat = JsonFormat | AvroFormat


def builtin_format(name: str) -> BuiltinFormat:
    """The built-in codec a ``format=`` shorthand stands for."""
    if name == "json":
        return JsonFormat()
    if name == "avro":
        return AvroFormat()
    raise ConfigError(f"unknown value format {name!r}; use 'json', 'avro' or codec=...")
