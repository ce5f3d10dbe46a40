"""Record value schemas and codecs: the value-codec protocol (:class:`Codec`) and its built-ins, pydantic
models as JSON, schemaless Avro or Schema Registry Avro.

``context.avsc`` (the scheduling context's Avro schema) and its layout notes also live in this folder.
"""

from cadenza.schemas.avro_schema import DEFAULT_NAMESPACE, AvroMapping, avro_mapping, avro_schema
from cadenza.schemas.codecs import (
    SCHEMA_FP_HEADER,
    AvroCodec,
    Headers,
    JsonCodec,
    ValueCodec,
    codec_for,
    schema_fingerprint,
)
from cadenza.schemas.errors import (
    ERROR_HEADER,
    ERROR_TYPE_HEADER,
    DecodeError,
    EncodeError,
    SchemaError,
)
from cadenza.schemas.formats import AvroFormat, BuiltinFormat, JsonFormat, builtin_format
from cadenza.schemas.registry import MAGIC_BYTE, RegistryAvroCodec, RegistrySchema, SchemaRegistryLike
from cadenza.schemas.value_codec import Codec, codec_problem

__all__ = [
    "DEFAULT_NAMESPACE",
    "ERROR_HEADER",
    "ERROR_TYPE_HEADER",
    "MAGIC_BYTE",
    "SCHEMA_FP_HEADER",
    "AvroCodec",
    "AvroFormat",
    "AvroMapping",
    "BuiltinFormat",
    "Codec",
    "DecodeError",
    "EncodeError",
    "Headers",
    "JsonCodec",
    "JsonFormat",
    "RegistryAvroCodec",
    "RegistrySchema",
    "SchemaError",
    "SchemaRegistryLike",
    "ValueCodec",
    "avro_mapping",
    "avro_schema",
    "builtin_format",
    "codec_for",
    "codec_problem",
    "schema_fingerprint",
]
