"""The decode stage: a consumed Kafka record becomes a :class:`~cadenza.worker.engine.unit.Unit`,
or a dead letter.

Source topics are decoded with the source's codec and model (and key type, when the source is keyed):
a user's codec (:class:`~cadenza.schemas.Codec`) through its protocol, a built-in one bound to the
topic once. An Avro source reads the Confluent Schema Registry wire format (subject
``<topic>-value``) when the worker has a registry client (:func:`make_registry_client`: configured by
``KafkaSettings.schema_registry_url``), schemaless Avro with a fingerprint header otherwise. Event
time comes from the declared field or function, or from the Kafka record
timestamp, and is computed only when a window downstream needs it. Repartition topics carry what a
``key_by`` upstream wrote (see :mod:`cadenza.worker.engine.wire`).

Anything about the record that cannot be read (bytes, schema, validation, key, event time) sends it
to the pipeline's dead-letter topic, and the decoder returns ``None``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from confluent_kafka import Message
from pydantic import BaseModel

from cadenza.errors import CadenzaError, ConfigError
from cadenza.infra.kafka.headers import get_header
from cadenza.pipelines.graph import NodeFunctions, NodeSpec
from cadenza.schemas import (
    AvroFormat,
    Codec,
    DecodeError,
    Headers,
    JsonFormat,
    SchemaRegistryLike,
    ValueCodec,
    builtin_format,
    codec_for,
)
from cadenza.schemas.value_codec import decode_with, encode_with
from cadenza.settings import KafkaSettings
from cadenza.state import decode_key
from cadenza.worker.engine.dead_letter import DeadLetters
from cadenza.worker.engine.unit import Unit
from cadenza.worker.engine.wire import (
    ORIGIN_HEADER,
    PROGRESS_HEADER,
    decode_record_value,
    unpack_origin,
    unpack_progress,
)

__all__ = [
    "Decoder",
    "RepartitionDecoder",
    "SchemaRegistryUnavailableError",
    "SourceDecoder",
    "event_time_seconds",
    "make_registry_client",
    "plausible_event_time",
    "value_codec",
]

KeyDecoder = Callable[[bytes | None], Any]


def event_time_seconds(raw: Any) -> float:
    """An event time as float seconds since the epoch: numbers are taken as seconds, datetimes converted.

    Rejects what cannot be a time (booleans, strings, NaN) so a bad field dead-letters the record
    instead of corrupting a watermark.
    """
    if isinstance(raw, bool):
        raise TypeError(f"event time must be seconds or a datetime, got {raw!r}")
    if isinstance(raw, int | float):
        seconds = float(raw)
    elif isinstance(raw, datetime):
        seconds = raw.timestamp()
    else:
        raise TypeError(f"event time must be seconds or a datetime, got {type(raw).__name__} {raw!r}")
    if seconds - seconds != 0.0:
        raise ValueError(f"event time must be finite, got {raw!r}")
    return plausible_event_time(seconds)


#: The largest event time a scheduling context can carry (2**52 microseconds, in seconds).
_MAX_EVENT_TIME = 2**52 / 1e6
#: How far ahead of the wall clock an event time may be before it is taken for a unit mistake.
EVENT_TIME_MAX_AHEAD = 366 * 86400.0
#: The wall clock when last read, plus EVENT_TIME_MAX_AHEAD (a list, so it can move on in place).
_ahead_limit = [time.time() + EVENT_TIME_MAX_AHEAD]


def plausible_event_time(seconds: float) -> float:
    """``seconds`` if it can be an event time; raises with the likely cause otherwise.

    An event time in milliseconds (or microseconds) is far out of range for a context and would push
    every watermark of its partition years ahead, so it is refused here, where the record can still be
    dead-lettered, instead of failing a step (or a whole worker) downstream. The wall clock is read
    only when a time lies beyond the last limit, so a plausible time costs two comparisons.
    """
    limit = _ahead_limit[0]
    if seconds > limit or seconds < -_MAX_EVENT_TIME:
        if seconds > -_MAX_EVENT_TIME:
            limit = _ahead_limit[0] = time.time() + EVENT_TIME_MAX_AHEAD
        if seconds > limit or seconds < -_MAX_EVENT_TIME:
            hint = " (did you send milliseconds? event times are seconds)" if seconds > 0 else ""
            raise ValueError(
                f"event time {seconds!r} s is implausible: more than a year ahead of the wall clock or out "
                f"of the range a scheduling context can carry (|t| < 2**52 us){hint}"
            )
    return seconds


def make_registry_client(settings: KafkaSettings) -> SchemaRegistryLike | None:
    """confluent-kafka's Schema Registry client for ``settings``, or ``None`` when no URL is set.

    Made once per worker: the client caches schemas, so each schema id is fetched once. It connects
    lazily, on the first schema lookup, so a registry that is down fails the first Avro record (which
    is not dead-lettered: see :class:`~cadenza.schemas.RegistryAvroCodec`), not the worker start.
    """
    config = settings.schema_registry_config()
    if config is None:
        return None
    try:
        from confluent_kafka.schema_registry import SchemaRegistryClient  # noqa: PLC0415 - optional extra
    except ImportError as exc:  # pragma: no cover - the dev extra installs it
        raise ConfigError(
            "schema_registry_url is set but the Schema Registry client is missing: "
            "pip install 'confluent-kafka[schemaregistry]'"
        ) from exc
    client: SchemaRegistryLike = SchemaRegistryClient(config)
    return client


def value_codec(
    value_format: str,
    model: type[BaseModel] | None,
    topic: str,
    registry_client: SchemaRegistryLike | None = None,
) -> ValueCodec[Any]:
    """The codec of a topic's values: JSON, or Avro (registry framed when there is a registry client).

    Shared by sources and, once the sink takes it, Avro sinks, so both ends of a topic agree.
    """
    if value_format == "avro":
        return codec_for("avro", model, registry_client, subject=f"{topic}-value")
    return codec_for("json", model)


class SchemaRegistryUnavailableError(CadenzaError):
    """The registry did not answer (network, auth): the record may be fine, so it is not dead-lettered."""


class Decoder:
    """Common to both decoders: who the units are for and where failures go."""

    __slots__ = ("dead", "entry", "needs_event_time", "pipeline")

    def __init__(self, pipeline: str, entry: str, dead: DeadLetters, *, needs_event_time: bool) -> None:
        self.pipeline = pipeline
        self.entry = entry
        self.dead = dead
        self.needs_event_time = needs_event_time

    def decode(self, message: Message, topic: str, partition: int, offset: int) -> Unit | None:
        raise NotImplementedError

    def _failed(self, message: Message, topic: str, partition: int, offset: int, exc: BaseException) -> None:
        error_type = exc.error_type if isinstance(exc, DecodeError) else type(exc).__name__
        self.dead.decode_failed(
            message, topic, partition, offset, node_id=self.entry, error=str(exc), error_type=error_type
        )


def _key_decoder(key_model: type[BaseModel] | type[str] | type[bytes] | None) -> KeyDecoder | None:
    if key_model is None or key_model is bytes:
        return None  # the raw key bytes are the key
    if key_model is str:
        return _str_key
    model = key_model

    def model_key(raw: bytes | None) -> Any:
        if raw is None:
            raise DecodeError(
                f"record has no key; the source declares key={model.__name__}", error_type="NoKey"
            )
        try:
            return model.model_validate_json(raw)  # type: ignore[union-attr]
        except Exception as exc:
            raise DecodeError(f"invalid key {model.__name__}: {exc}", error_type=type(exc).__name__) from exc

    return model_key


def _str_key(raw: bytes | None) -> str:
    if raw is None:
        raise DecodeError("record has no key; the source declares key=str", error_type="NoKey")
    try:
        return raw.decode()
    except UnicodeDecodeError as exc:
        raise DecodeError(f"key is not UTF-8: {exc}", error_type="UnicodeDecodeError") from exc


def _header_list(message: Message) -> Headers | None:
    headers = message.headers()
    return list(headers.items()) if isinstance(headers, dict) else headers


class _UserCodec:
    """A user's :class:`~cadenza.schemas.Codec` bound to a source's model, as the decoder calls codecs."""

    __slots__ = ("codec", "model")

    def __init__(self, codec: Codec, model: type[BaseModel] | None) -> None:
        self.codec = codec
        self.model = model

    def decode(self, data: bytes, headers: Headers | None = None) -> Any:
        return decode_with(self.codec, data, self.model, headers)

    def encode(self, value: Any) -> bytes:
        return encode_with(self.codec, value)

    def headers(self) -> list[tuple[str, bytes]]:
        return []


class SourceDecoder(Decoder):
    """Decodes with the source's codec; JSON values of a model take a shortcut (see ``fast``)."""

    __slots__ = ("codec", "fast", "key_decoder", "registry", "timestamp", "with_headers")

    def __init__(
        self,
        pipeline: str,
        node: NodeSpec,
        functions: NodeFunctions,
        dead: DeadLetters,
        *,
        needs_event_time: bool,
        registry_client: SchemaRegistryLike | None = None,
    ) -> None:
        super().__init__(pipeline, node.id, dead, needs_event_time=needs_event_time)
        given = functions.codec
        model = functions.value_model
        self.fast: Callable[[bytes], Any] | None = None
        self.with_headers = self.registry = False
        builtin = builtin_format(str(node.parameters["format"])) if given is None else given
        if not isinstance(builtin, JsonFormat | AvroFormat):
            # A user's codec reads headers like schemaless Avro does, so it takes that branch.
            self.codec: ValueCodec[Any] = _UserCodec(builtin, model)
            self.with_headers = True
            self.key_decoder = _key_decoder(functions.key_model)
            self.timestamp = functions.timestamp
            return
        value_format = builtin.name
        if value_format == "avro" and model is None:
            raise ConfigError(
                f"pipeline {pipeline!r}, step {node.id!r}: an Avro source needs value=Model to read with"
            )
        if isinstance(builtin, AvroFormat) and builtin.registry_client is not None:
            registry_client = builtin.registry_client
        self.codec = builtin.bind(model, str(node.parameters["topic"]), registry_client)
        # Only schemaless Avro reads headers (the schema fingerprint); JSON and registry-framed Avro
        # (the schema id is in the value) skip building the header list.
        self.with_headers = value_format == "avro" and registry_client is None
        #: A registry that cannot be reached stops the worker instead of dead-lettering good records.
        self.registry = value_format == "avro" and registry_client is not None
        # JSON into a model is the common case: call pydantic's validator directly, saving the codec's two
        # Python-level calls per record. On failure the codec decodes again, so a bad record gets exactly
        # the codec's DecodeError (and a record only the codec accepts is still accepted).
        if value_format == "json" and model is not None:
            self.fast = model.__pydantic_validator__.validate_json
        self.key_decoder = _key_decoder(functions.key_model)
        self.timestamp = functions.timestamp

    def decode(self, message: Message, topic: str, partition: int, offset: int) -> Unit | None:
        raw = message.value()
        try:
            if raw is None:
                raise DecodeError("record has no value (a tombstone)", error_type="NoValue")
            fast = self.fast
            if fast is not None:
                try:
                    value = fast(raw)
                except Exception:
                    value = self.codec.decode(raw)
            elif self.with_headers:
                value = self.codec.decode(raw, _header_list(message))
            elif self.registry:
                value = self._registry_decode(raw, topic, partition, offset)
            else:
                value = self.codec.decode(raw)
            key_decoder = self.key_decoder
            key = message.key() if key_decoder is None else key_decoder(message.key())
            event_time = 0.0
            if self.needs_event_time:
                timestamp = self.timestamp
                if timestamp is None:
                    event_time = plausible_event_time(message.timestamp()[1] / 1000.0)
                else:
                    event_time = event_time_seconds(timestamp(value))
        except (SchemaRegistryUnavailableError, KeyboardInterrupt):
            raise
        except BaseException as exc:  # the user's validators and timestamp function are user code
            self._failed(message, topic, partition, offset, exc)
            return None
        return Unit(self.pipeline, self.entry, topic, partition, offset, key, value, event_time, message)

    def _registry_decode(self, raw: bytes, topic: str, partition: int, offset: int) -> Any:
        try:
            return self.codec.decode(raw)
        except DecodeError:
            raise
        except Exception as exc:  # the registry could not be asked: nothing is known about the record
            raise SchemaRegistryUnavailableError(
                f"{topic}[{partition}]@{offset}: the Schema Registry could not be asked for the record's "
                f"schema ({type(exc).__name__}: {exc}); the record is not dead-lettered and is read again "
                "after a restart, once the registry answers"
            ) from exc


class RepartitionDecoder(Decoder):
    def decode(self, message: Message, topic: str, partition: int, offset: int) -> Unit | None:
        raw = message.value()
        try:
            headers = message.headers()
            packed = get_header(headers, ORIGIN_HEADER)
            if packed is None:
                progress = get_header(headers, PROGRESS_HEADER)
                if progress is not None:
                    return self._progress(message, topic, partition, offset, progress)
                raise DecodeError(f"repartition record has no {ORIGIN_HEADER} header", error_type="NoOrigin")
            if raw is None:
                raise DecodeError("repartition record has no value", error_type="NoValue")
            value = decode_record_value(raw)
            raw_key = message.key()
            key = None if raw_key is None else decode_key(raw_key)
            origin = unpack_origin(packed)
        except Exception as exc:
            self._failed(message, topic, partition, offset, exc)
            return None
        unit = Unit(self.pipeline, self.entry, topic, partition, offset, key, value, origin[3], message)
        unit.origin = origin
        return unit

    def _progress(
        self, message: Message, topic: str, partition: int, offset: int, packed: bytes
    ) -> Unit | None:
        """A progress record (see :mod:`cadenza.worker.engine.wire`) as a unit, or ``None`` where nothing
        downstream keeps a watermark (then it is simply done)."""
        if not self.needs_event_time:
            return None
        upstream, event_time = unpack_progress(packed)
        unit = Unit(self.pipeline, self.entry, topic, partition, offset, None, None, event_time, message)
        unit.origin = (upstream, -1, -1, event_time)
        return unit
