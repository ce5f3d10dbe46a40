"""The writer of the ``cadenza-kafka`` data source: DataFrame rows as Kafka records, at least once.

Each Spark task produces its rows with an idempotent cadenza producer (one per Python worker and
configuration, reused by the worker's later tasks) and returns only after every record is
acknowledged (flush, then raise on any delivery failure). A task that cannot deliver therefore
fails, Spark fails (and retries) the micro-batch, and the batch is never marked done with records
missing. Retried batches may write some records twice: at-least-once, like Spark's native
Kafka sink. The input columns are checked on the driver when the query starts, so a wrong column type
fails there with a message instead of on an executor.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaException, Producer
from pyspark.sql import Row
from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import ArrayType, BinaryType, DataType, IntegerType, StringType, StructType

from cadenza.errors import ConfigError
from cadenza.infra.kafka.clients import ClientErrors, DeliveryReport, flush_or_raise, make_producer
from cadenza.infra.kafka.errors import DeliveryError, from_kafka_exception
from cadenza.infra.spark.options import FORMAT_NAME, SinkOptions

_log = logging.getLogger("cadenza.spark.kafka")

#: How often (in records) the producer serves delivery callbacks while producing.
_POLL_EVERY = 1000


@dataclass(frozen=True)
class SinkColumns:
    """Where each Kafka field is in the input rows (positions, resolved once on the driver)."""

    value: int
    key: int | None
    topic: int | None
    partition: int | None
    headers: int | None


def sink_columns(schema: StructType, options: SinkOptions) -> SinkColumns:
    """Check the input columns against what a Kafka record can hold; ConfigError says what to change.

    Same contract as Spark's native sink: ``value`` (string or binary) is required; ``key``,
    ``headers``, ``topic`` and ``partition`` are optional; other columns are ignored. The ``topic``
    option, when given, wins over a ``topic`` column.
    """
    names = [field.name.lower() for field in schema.fields]
    types = {field.name.lower(): field.dataType for field in schema.fields}

    def position(name: str, allowed: tuple[type[DataType], ...], what: str) -> int | None:
        if name not in types:
            return None
        if not isinstance(types[name], allowed):
            raise ConfigError(
                f"{FORMAT_NAME} sink: column {name} must be {what}, but it is {types[name].simpleString()}; "
                f"cast it (e.g. col('{name}').cast('{'string' if name == 'topic' else 'binary'}'))"
            )
        return names.index(name)

    value = position("value", (StringType, BinaryType), "string or binary")
    if value is None:
        raise ConfigError(
            f"{FORMAT_NAME} sink needs a value column (string or binary); the input has "
            f"{', '.join(names) or 'no columns'}. Select or alias one, e.g. to_json(struct(*)) AS value"
        )
    topic = position("topic", (StringType,), "a string")
    if topic is None and options.topic is None:
        raise ConfigError(f"{FORMAT_NAME} sink needs a topic: set option topic or add a string column topic")
    headers = position("headers", (ArrayType,), "array<struct<key:string,value:binary>>")
    if headers is not None:
        element = types["headers"]
        assert isinstance(element, ArrayType)
        inner = element.elementType
        if not (
            isinstance(inner, StructType)
            and [f.name for f in inner.fields] == ["key", "value"]
            and isinstance(inner.fields[0].dataType, StringType)
            and isinstance(inner.fields[1].dataType, (BinaryType, StringType))
        ):
            raise ConfigError(
                f"{FORMAT_NAME} sink: column headers must be array<struct<key:string,value:binary>>, but "
                f"it is {element.simpleString()}"
            )
    return SinkColumns(
        value=value,
        key=position("key", (StringType, BinaryType), "string or binary"),
        topic=None if options.topic is not None else topic,
        partition=position("partition", (IntegerType,), "an int"),
        headers=headers,
    )


@dataclass(frozen=True)
class KafkaCommitMessage(WriterCommitMessage):
    """What one task delivered; the driver logs the batch total."""

    records: int


def _bytes(value: Any) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    return bytes(value)  # bytearray from Spark's binary columns


#: Producers of this Python worker process, by a digest of their config. Spark reuses its Python
#: workers across tasks and micro-batches; a new idempotent producer costs a producer-id handshake
#: (about half a second on some brokers) per task, so one is kept per config, like the native sink's
#: producer cache. Tasks in one worker run one after another, so a flush waits only for their records.
_PRODUCERS: dict[str, tuple[Producer, ClientErrors]] = {}
_PRODUCERS_LOCK = threading.Lock()


def _cached_producer(options: SinkOptions) -> tuple[Producer, ClientErrors]:
    config = options.settings.client_config()
    digest = hashlib.sha256(json.dumps(sorted(config.items())).encode()).hexdigest()
    with _PRODUCERS_LOCK:
        if digest not in _PRODUCERS:
            _PRODUCERS[digest] = make_producer(options.settings, **options.settings.overrides)
        return _PRODUCERS[digest]


def _drop_producer(producer: Producer) -> None:
    """Forget a producer after a failure, so the next task starts from a fresh one."""
    with _PRODUCERS_LOCK:
        for digest, (cached, _errors) in list(_PRODUCERS.items()):
            if cached is producer:
                del _PRODUCERS[digest]


def produce_rows(options: SinkOptions, columns: SinkColumns, rows: Iterator[Row]) -> KafkaCommitMessage:
    """Produce every row and return only once all are acknowledged; raise on any failure."""
    producer, errors = _cached_producer(options)
    try:
        return _produce_all(producer, errors, options, columns, rows)
    except BaseException:
        # Undelivered records of this task must not be retried behind the next task's back.
        producer.purge()
        _drop_producer(producer)
        raise


def _produce_all(
    producer: Producer, errors: ClientErrors, options: SinkOptions, columns: SinkColumns, rows: Iterator[Row]
) -> KafkaCommitMessage:
    report = DeliveryReport()
    count = 0
    for row in rows:
        topic = options.topic if columns.topic is None else row[columns.topic]
        if not topic:
            # The row itself is left out of the message: it is user data and may be sensitive.
            raise ConfigError(
                f"{FORMAT_NAME} sink: row {count} of this task has a null topic and no topic option is set"
            )
        kwargs: dict[str, Any] = {
            "value": _bytes(row[columns.value]),
            "key": None if columns.key is None else _bytes(row[columns.key]),
            "on_delivery": report,
        }
        if columns.partition is not None and row[columns.partition] is not None:
            kwargs["partition"] = row[columns.partition]
        if columns.headers is not None and row[columns.headers]:
            kwargs["headers"] = [(header[0], _bytes(header[1])) for header in row[columns.headers]]
        _produce(producer, topic, kwargs)
        count += 1
        if count % _POLL_EVERY == 0:
            producer.poll(0)
            errors.raise_fatal()
    flush_or_raise(producer, report, timeout=options.flush_timeout_s)
    errors.raise_fatal()
    return KafkaCommitMessage(records=count)


def _produce(producer: Any, topic: str, kwargs: dict[str, Any]) -> None:
    while True:
        try:
            producer.produce(topic, **kwargs)
            return
        except BufferError:
            # The local queue is full: wait for acknowledgements to make room, then retry.
            producer.poll(0.5)
        except KafkaException as exc:
            raise DeliveryError(
                str(from_kafka_exception(exc, f"{FORMAT_NAME} sink producing to {topic!r}"))
            ) from None


def _total(messages: list[WriterCommitMessage | None]) -> int:
    return sum(m.records for m in messages if isinstance(m, KafkaCommitMessage))


class _RowsToKafka:
    """What the streaming and the batch sink share: each task produces its rows and flushes them."""

    def __init__(self, options: SinkOptions, columns: SinkColumns) -> None:
        self.options = options
        self.columns = columns

    def write(self, iterator: Iterator[Row]) -> WriterCommitMessage:
        return produce_rows(self.options, self.columns, iterator)


class KafkaStreamWriter(_RowsToKafka, DataSourceStreamWriter):
    """Streaming sink: one producer per task and micro-batch."""

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        _log.info("%s sink: batch %d delivered %d record(s)", FORMAT_NAME, batchId, _total(messages))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        # Kafka has no rollback for a non-transactional producer: what finished tasks delivered stays,
        # and Spark re-runs the batch (at-least-once).
        _log.warning(
            "%s sink: batch %d failed; %d record(s) from finished tasks stay in Kafka and may be written "
            "again when the batch is retried",
            FORMAT_NAME,
            batchId,
            _total(messages),
        )


class KafkaBatchWriter(_RowsToKafka, DataSourceWriter):
    """Batch sink (``df.write.format("cadenza-kafka")``): the same per-task delivery guarantee."""

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        _log.info("%s sink: delivered %d record(s)", FORMAT_NAME, _total(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        _log.warning(
            "%s sink: write failed; %d record(s) from finished tasks stay in Kafka",
            FORMAT_NAME,
            _total(messages),
        )
