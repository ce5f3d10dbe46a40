"""The streaming reader of the ``cadenza-kafka`` data source: Kafka partitions as Spark micro-batches.

Why it is shaped this way:

- **Offsets are Spark's, not Kafka's.** Each micro-batch's end offsets are plain JSON
  (``{topic: {partition: offset}}``) that Spark writes to its checkpoint before running the batch.
  A batch reads exactly ``[start, end)`` of every partition, with a consumer that is *assigned*
  those offsets and never joins a group or commits, so re-running a batch after a crash reads the
  same records, and a restarted query neither skips nor repeats input.
- **The end of a partition is read, not trusted.** Some brokers (Tansu) under-report the high
  watermark for multi-record batches; :func:`~cadenza.infra.kafka.offsets.end_offsets` finds the
  true end, otherwise a micro-batch would silently stop short of records that are already there.
- **Every wait is bounded.** A read task that makes no progress for ``kafkaConsumer.pollTimeoutMs``
  fails with the partition, the offsets and the broker named, instead of hanging the query.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
from confluent_kafka import (
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaError,
    TopicPartition,
)
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from cadenza.errors import ConfigError
from cadenza.infra.kafka.clients import ClientErrors, make_consumer
from cadenza.infra.kafka.errors import KafkaClientError, from_kafka_error
from cadenza.infra.kafka.offsets import end_offsets
from cadenza.infra.spark.options import (
    EARLIEST,
    FORMAT_NAME,
    LATEST,
    Offsets,
    SourceOptions,
    TopicPartitionKey,
    describe_connection,
    offsets_from_json,
    offsets_to_json,
)

_log = logging.getLogger("cadenza.spark.kafka")

HEADERS_TYPE = ArrayType(
    StructType([StructField("key", StringType()), StructField("value", BinaryType())]), containsNull=True
)


def source_schema(include_headers: bool = True) -> StructType:
    """The rows the source produces: the same columns, in the same order, as Spark's native connector."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", HEADERS_TYPE))
    return StructType(fields)


class KafkaReadError(KafkaClientError):
    """A read task could not read its offset range (records gone, broker silent)."""


@dataclass(frozen=True)
class KafkaInputPartition(InputPartition):
    """One Spark task: the records ``[start, end)`` of one Kafka partition."""

    topic: str
    partition: int
    start: int
    end: int


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Plans micro-batches on the driver and reads partitions on the executors.

    The driver-side methods (offsets, partitions) run in one long-lived Python process per query,
    so the metadata consumer is created once and reused; :meth:`read` runs in Spark's Python workers
    on a pickled copy, which is why the client is dropped when pickling.
    """

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._metadata: Consumer | None = None
        self._metadata_errors: ClientErrors | None = None
        self._target: dict[TopicPartitionKey, int] | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_metadata"] = None
        state["_metadata_errors"] = None
        return state

    # -- driver side -------------------------------------------------------------------------------

    def initialOffset(self) -> Offsets:  # noqa: N802 - PySpark API
        """Where a new query starts: ``startingOffsets`` resolved to concrete offsets now.

        Resolved eagerly (not kept as "latest") because Spark checkpoints what this returns, and a
        restarted query must start where the first run actually started.
        """
        _log.info("%s starts at %s", connection_summary(self.options), self.options.starting)
        partitions = self._subscribed_partitions()
        starting = self.options.starting
        if starting == "earliest":
            return offsets_to_json(self._low_offsets(partitions))
        if starting == "latest":
            return offsets_to_json(self._true_ends(partitions))
        missing = sorted(set(partitions) - set(starting))
        if missing:
            raise ConfigError(
                "startingOffsets must give every partition of the subscribed topics "
                f"(-2 = earliest, -1 = latest); missing: {_names(missing)}"
            )
        unknown = sorted(set(starting) - set(partitions))
        if unknown:
            raise ConfigError(f"startingOffsets names partitions that do not exist: {_names(unknown)}")
        lows = self._low_offsets(partitions)
        ends = self._true_ends(partitions)
        resolved: dict[TopicPartitionKey, int] = {}
        for tp, offset in sorted(starting.items()):
            if offset == EARLIEST:
                resolved[tp] = lows[tp]
            elif offset == LATEST:
                resolved[tp] = ends[tp]
            elif not lows[tp] <= offset <= ends[tp]:
                raise ConfigError(
                    f"startingOffsets: offset {offset} of {_names([tp])} is outside the records it holds "
                    f"[{lows[tp]}, {ends[tp]}]; use an offset in that range, -2 or -1"
                )
            else:
                resolved[tp] = offset
        return offsets_to_json(resolved)

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802 - PySpark API
        """Fix the query's target at the data present now, so an availableNow query ends."""
        self._target = self._true_ends(self._subscribed_partitions())
        _log.info("%s availableNow target: %s", FORMAT_NAME, offsets_to_json(self._target))

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802 - PySpark API
        limit = self.options.max_records_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> Offsets:  # noqa: N802 - PySpark API
        """The end of the next micro-batch: the true partition ends, capped by the read limit.

        Partitions that appeared since ``start`` (a new topic matching the pattern, added partitions)
        are included from their earliest offset, like Spark's native connector.
        """
        begin = offsets_from_json(start)
        if self._target is not None:
            available = dict(self._target)
        else:
            available = self._true_ends(self._subscribed_partitions())
        new = [tp for tp in available if tp not in begin]
        begin.update(self._low_offsets(new))
        # A partition that vanished (topic deleted, no longer matching) keeps its position.
        ends = {tp: available.get(tp, begin[tp]) for tp in begin}
        shrunk = sorted(tp for tp in ends if ends[tp] < begin[tp])
        if shrunk:
            ends.update(self._after_data_loss(shrunk, begin, ends))
        if isinstance(limit, ReadMaxRows):
            taken = spread_budget({tp: max(0, ends[tp] - begin[tp]) for tp in ends}, limit.max_rows)
            ends = {tp: begin[tp] + taken[tp] if ends[tp] > begin[tp] else ends[tp] for tp in ends}
        return offsets_to_json(ends)

    def _after_data_loss(
        self,
        shrunk: list[TopicPartitionKey],
        begin: Mapping[TopicPartitionKey, int],
        ends: Mapping[TopicPartitionKey, int],
    ) -> dict[TopicPartitionKey, int]:
        """Partitions that now end before where the query is: the topic was recreated or truncated.

        Failing is the default (like the native connector's failOnDataLoss): the records the query
        expected past the new end are gone, and continuing would hide it. With failOnDataLoss=false
        the partition restarts from its earliest record: a batch may end *before* it starts for such a
        partition, which plans no task and moves the next batch's start back to the new records.
        """
        detail = ", ".join(
            f"{_names([tp])} ends at {ends[tp]} but was read up to {begin[tp]}" for tp in shrunk
        )
        if self.options.fail_on_data_loss:
            raise KafkaReadError(
                f"{FORMAT_NAME}: partitions went backwards ({detail}); the topic was deleted and recreated "
                "or truncated, so records may be lost. Set failOnDataLoss=false to continue from the "
                "earliest records, or start the query with a new checkpoint."
            )
        _log.warning(
            "%s: partitions went backwards (%s); continuing from their earliest records", FORMAT_NAME, detail
        )
        return self._low_offsets(shrunk)

    def reportLatestOffset(self) -> Offsets | None:  # noqa: N802 - PySpark API
        return None

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """One Spark task per Kafka partition that has records in ``[start, end)``."""
        begin = offsets_from_json(start)
        finish = offsets_from_json(end)
        new = [tp for tp in finish if tp not in begin]
        begin.update(self._low_offsets(new))
        return [
            KafkaInputPartition(topic, partition, begin[(topic, partition)], stop)
            for (topic, partition), stop in sorted(finish.items())
            if stop > begin[(topic, partition)]
        ]

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: progress lives in Spark's checkpoint, not in Kafka consumer groups."""
        _log.debug("%s batch done up to %s", FORMAT_NAME, end)

    def stop(self) -> None:
        if self._metadata is not None:
            self._metadata.close()
            self._metadata = None

    def _consumer(self) -> Consumer:
        if self._metadata is None:
            self._metadata, self._metadata_errors = make_consumer(
                self.options.settings,
                group_id=f"cadenza-spark-metadata-{uuid.uuid4().hex}",
                **self.options.settings.overrides,
            )
        return self._metadata

    def _subscribed_partitions(self) -> list[TopicPartitionKey]:
        timeout = self.options.settings.request_timeout_ms / 1000
        try:
            metadata = self._consumer().list_topics(timeout=timeout)
        except Exception as exc:
            raise KafkaClientError(
                f"{FORMAT_NAME} could not list topics at {self.options.settings.bootstrap_servers} "
                f"within {timeout:.0f}s: {exc}"
            ) from exc
        if self._metadata_errors is not None:
            self._metadata_errors.raise_fatal()
        found: list[TopicPartitionKey] = []
        for name, topic in metadata.topics.items():
            if topic.error is None and self.options.matches(name):
                found.extend((name, partition) for partition in topic.partitions)
        if self.options.subscribe:
            absent = sorted(set(self.options.subscribe) - {topic for topic, _ in found})
            if absent:
                _log.warning("%s: subscribed topics do not exist (yet): %s", FORMAT_NAME, ", ".join(absent))
        return sorted(found)

    def _low_offsets(self, partitions: list[TopicPartitionKey]) -> dict[TopicPartitionKey, int]:
        consumer = self._consumer()
        timeout = self.options.settings.request_timeout_ms / 1000
        lows: dict[TopicPartitionKey, int] = {}
        for topic, partition in partitions:
            try:
                low, _high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout)
            except Exception as exc:
                raise KafkaClientError(
                    f"could not read the earliest offset of {topic}[{partition}]: {exc}"
                ) from exc
            lows[(topic, partition)] = max(0, low)
        return lows

    def _true_ends(self, partitions: list[TopicPartitionKey]) -> dict[TopicPartitionKey, int]:
        if not partitions:
            return {}
        return end_offsets(
            self.options.settings, partitions, timeout=self.options.settings.request_timeout_ms / 1000
        )

    # -- executor side -----------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The records of one planned range, as Arrow batches of :func:`source_schema`."""
        if not isinstance(partition, KafkaInputPartition):
            raise TypeError(f"{FORMAT_NAME} got an input partition it did not plan: {partition!r}")
        return read_range_batches(self.options, partition)


def read_range(options: SourceOptions, part: KafkaInputPartition) -> Iterator[tuple[Any, ...]]:
    """The records ``[part.start, part.end)`` of one partition as rows of :func:`source_schema`."""
    for messages in _consume_range(options, part):
        for message in messages:
            yield _row(message, options.include_headers)


def read_range_batches(options: SourceOptions, part: KafkaInputPartition) -> Iterator[pa.RecordBatch]:
    """The records ``[part.start, part.end)`` of one partition as Arrow batches of :func:`source_schema`.

    This is what Spark's Python worker gets: handing it columns instead of one tuple per record
    skips its per-row conversion, which was most of the reader's cost.
    """
    schema = arrow_source_schema(options.include_headers)
    for messages in _consume_range(options, part):
        if messages:
            yield _batch(messages, schema, options.include_headers)


def _consume_range(options: SourceOptions, part: KafkaInputPartition) -> Iterator[list[Any]]:
    """Yield the messages of exactly ``[part.start, part.end)`` in fetched chunks, then close the consumer.

    "Exactly" survives gaps (compaction, transaction markers): the range ends at the first record at
    or past ``end``, or when the consumer's position reaches ``end``. A partition-EOF event *before*
    ``end`` is ignored, because a broker that under-reports its watermark signals EOF early.
    """
    consumer, errors = make_consumer(
        options.settings,
        group_id=f"cadenza-spark-read-{uuid.uuid4().hex}",
        **{
            "enable.partition.eof": True,
            # An offset that no longer exists is data loss: fail (the default) or skip ahead.
            "auto.offset.reset": "error" if options.fail_on_data_loss else "earliest",
            "fetch.wait.max.ms": 100,
            # Large fetches: a read task wants a whole range, not a trickle.
            "fetch.max.bytes": 64 * 1024 * 1024,
            "max.partition.fetch.bytes": 16 * 1024 * 1024,
            "queued.min.messages": 200_000,
            **options.settings.overrides,
        },
    )
    position = part.start
    last_progress = time.monotonic()
    where = f"{part.topic}[{part.partition}]"
    try:
        consumer.assign([TopicPartition(part.topic, part.partition, part.start)])
        while position < part.end:
            errors.raise_fatal()
            messages = consumer.consume(num_messages=min(_CHUNK, part.end - position), timeout=0.5)
            chunk: list[Any] = []
            for message in messages:
                error = message.error()
                offset = message.offset()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        if offset is not None and offset >= part.end:
                            position = part.end
                        continue
                    raise _read_error(options, part, position, error)
                if offset is None or offset < position:
                    continue
                if offset >= part.end:
                    position = part.end
                    break
                position = offset + 1
                chunk.append(message)
            if chunk:
                last_progress = time.monotonic()
                yield chunk
            if time.monotonic() - last_progress > options.poll_timeout_s:
                raise KafkaReadError(
                    f"{FORMAT_NAME}: no record of {where} arrived for {options.poll_timeout_s:g}s while "
                    f"reading offsets [{part.start}, {part.end}), stuck at {position}; broker "
                    f"{options.settings.bootstrap_servers}. Is it reachable? Raise "
                    "kafkaConsumer.pollTimeoutMs if it is only slow."
                )
    finally:
        consumer.close()


#: Messages per consume() call and so per Arrow batch: big enough that per-call costs vanish.
_CHUNK = 10_000


def arrow_source_schema(include_headers: bool = True) -> pa.Schema:
    """:func:`source_schema` as the Arrow schema Spark checks a reader's batches against."""
    return to_arrow_schema(source_schema(include_headers), timezone="UTC")


def _batch(messages: list[Any], schema: pa.Schema, include_headers: bool) -> pa.RecordBatch:
    stamps = [message.timestamp() for message in messages]
    kinds = [_TIMESTAMP_TYPES.get(kind) for kind, _ in stamps]
    micros = [
        millis * 1000 if kind is not None else None for kind, (_, millis) in zip(kinds, stamps, strict=True)
    ]
    count = len(messages)
    columns: list[pa.Array] = [
        pa.array([message.key() for message in messages], pa.binary()),
        pa.array([message.value() for message in messages], pa.binary()),
        pa.repeat(pa.scalar(messages[0].topic(), pa.string()), count),
        pa.repeat(pa.scalar(messages[0].partition(), pa.int32()), count),
        pa.array([message.offset() for message in messages], pa.int64()),
        pa.array(micros, schema.field("timestamp").type),
        pa.array(kinds, pa.int32()),
    ]
    if include_headers:
        columns.append(
            pa.array(
                [
                    [
                        {"key": name, "value": value.encode() if isinstance(value, str) else value}
                        for name, value in message.headers() or ()
                    ]
                    for message in messages
                ],
                schema.field("headers").type,
            )
        )
    return pa.RecordBatch.from_arrays(columns, schema=schema)


_TIMESTAMP_TYPES = {TIMESTAMP_CREATE_TIME: 0, TIMESTAMP_LOG_APPEND_TIME: 1}


def _read_error(
    options: SourceOptions, part: KafkaInputPartition, position: int, error: KafkaError
) -> Exception:
    where = f"{part.topic}[{part.partition}]"
    if error.code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
        return KafkaReadError(
            f"{FORMAT_NAME}: offset {position} of {where} no longer exists (deleted by retention or the "
            f"topic was recreated), so records [{position}, {part.end}) are lost. Set failOnDataLoss=false "
            f"to skip lost records. ({error.name()}: {error.str()})",
            code=error.name(),
        )
    return from_kafka_error(error, f"{FORMAT_NAME} reading {where} at offset {position}")


def _row(message: Any, include_headers: bool) -> tuple[Any, ...]:
    kind, millis = message.timestamp()
    if kind == TIMESTAMP_CREATE_TIME:
        timestamp, timestamp_type = datetime.fromtimestamp(millis / 1000, tz=UTC), 0
    elif kind == TIMESTAMP_LOG_APPEND_TIME:
        timestamp, timestamp_type = datetime.fromtimestamp(millis / 1000, tz=UTC), 1
    else:
        timestamp, timestamp_type = None, None
    row = (
        message.key(),
        message.value(),
        message.topic(),
        message.partition(),
        message.offset(),
        timestamp,
        timestamp_type,
    )
    if not include_headers:
        return row
    headers = message.headers()
    return (
        *row,
        [(name, value.encode() if isinstance(value, str) else value) for name, value in headers or ()],
    )


def spread_budget(lags: Mapping[TopicPartitionKey, int], budget: int) -> dict[TopicPartitionKey, int]:
    """How many records each partition may contribute so the total is at most ``budget``.

    Fair rather than proportional: every partition with a backlog gets an equal share, and what a
    short partition leaves over goes to the others. Any budget >= 1 makes progress, so a query with
    a tiny maxRecordsPerTrigger still advances.
    """
    taken = dict.fromkeys(lags, 0)
    active = sorted(tp for tp, lag in lags.items() if lag > 0)
    remaining = budget
    while remaining > 0 and active:
        share = max(1, remaining // len(active))
        still: list[TopicPartitionKey] = []
        for tp in active:
            if remaining == 0:
                break
            give = min(share, lags[tp] - taken[tp], remaining)
            taken[tp] += give
            remaining -= give
            if taken[tp] < lags[tp]:
                still.append(tp)
        active = still
    return taken


def _names(partitions: list[TopicPartitionKey]) -> str:
    return ", ".join(f"{topic}[{partition}]" for topic, partition in partitions)


def connection_summary(options: SourceOptions) -> str:
    """For logs: where the source reads from, with secrets starred."""
    topics = options.subscribe_pattern or ",".join(options.subscribe)
    return f"{FORMAT_NAME} source of {topics} ({describe_connection(options.settings)})"
