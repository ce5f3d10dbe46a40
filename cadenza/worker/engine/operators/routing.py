"""Steps that write to Kafka: key_by (to its repartition topic) and sink."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from confluent_kafka import KafkaException
from pydantic import BaseModel

from cadenza.infra.metrics.prometheus import OperatorMetrics
from cadenza.operators import Window
from cadenza.pipelines.graph import TopicFormat
from cadenza.scheduling.context import CONTEXT_HEADER, SchedulingContext
from cadenza.schemas import AvroFormat, Codec, EncodeError, JsonFormat, ValueCodec, codec_for
from cadenza.schemas.registry import SchemaRegistryLike
from cadenza.schemas.value_codec import encode_with
from cadenza.state import encode_key
from cadenza.state.safe_codec import UnsupportedValueError
from cadenza.worker.engine.dead_letter import DeadLetters
from cadenza.worker.engine.operators.base import Operator
from cadenza.worker.engine.output import OutHeaders, Output, RecordTooLargeError, too_large
from cadenza.worker.engine.unit import Unit
from cadenza.worker.engine.wire import (
    ORIGIN_HEADER,
    PROGRESS_HEADER,
    encode_record_value,
    encode_sink_key,
    encode_window_result,
    pack_origin,
    pack_progress,
)

__all__ = [
    "HEARTBEAT_FLOOR",
    "URGENT_PROGRESS_SHARE",
    "KeyByOp",
    "KeyByStamp",
    "SinkOp",
    "SinkStamp",
    "progress_due",
]

_NEG_INF = -math.inf
_INF = math.inf

#: An urgent progress broadcast (see :func:`progress_due`) waits at least this share of the interval
#: after the previous one, so that a backlog crossing a window per record does not send progress
#: after every run slice.
URGENT_PROGRESS_SHARE = 0.2

#: What a heartbeat (see :meth:`KeyByOp.heartbeat`) says of an input partition none of whose records
#: has reached the key_by yet: an event time below any record's, so the watermark downstream stays
#: where it is. Finite, because a reader refuses a progress record without a finite event time.
HEARTBEAT_FLOOR = -1e300


def progress_due(keyed: Sequence[KeyByOp], elapsed: float, interval: float) -> bool:
    """Whether the worker should send progress records now, ``elapsed`` seconds after the last time.

    Every ``interval``, and sooner (at most every ``URGENT_PROGRESS_SHARE * interval``) when a key_by
    was handed a record that moves its input partition past the next window close downstream: the
    repartition partitions that did not get that record can close the window only once they hear of
    it, and the rest of the interval would add up to that much to the window's result. What the
    progress records say does not change, only when they are sent, so results do not either.
    """
    if elapsed >= interval:
        return True
    return elapsed >= interval * URGENT_PROGRESS_SHARE and any(op.urgent for op in keyed)


KeyByStamp = Callable[[SchedulingContext, Unit, float, Any], bytes]
"""``(context in, unit, event time, value) -> cadenza-ctx`` for the sub-topology reading the
repartition topic."""
SinkStamp = Callable[[Unit, Window | None, Any], bytes | None]
"""``(unit, window, value) -> cadenza-ctx`` of a result (``None``: none); also records its deadline."""


class _Writer(Operator):
    """A step that writes to a Kafka topic through the worker's output: what it writes is counted as
    produced in its step's series, the one its dead letters go to (the worker's total is a sum over
    such series, see :class:`~cadenza.worker.engine.counters.WorkerCounters`), once the producer took it."""

    __slots__ = ("dead", "metrics", "output", "topic")

    def __init__(self, node_id: str, topic: str, output: Output, dead: DeadLetters) -> None:
        super().__init__(node_id)
        self.topic = topic
        self.output = output
        self.dead = dead
        self.metrics: OperatorMetrics = dead.series(node_id)


class KeyByOp(_Writer):
    """Re-keys a record and writes it to the repartition topic, where the next sub-topology reads it.

    Each record carries its origin (see :mod:`cadenza.worker.engine.wire`); ``seq`` numbers the records one
    unit produces here (a flat_map or a window upstream may produce several). A window on the input
    is dropped here: after re-keying, the record is grouped anew.

    When the topic's reader keeps a watermark, ``partitions`` is the topic's partition count and
    the step remembers, per input partition, the largest event time it has been handed (or, when
    only stateless steps lead here, that any record of the partition has had at the entry);
    :meth:`broadcast_progress` (called by the worker every ``progress_interval``) writes what grew to every
    partition of the topic as a progress record, so each downstream partition learns how far every
    upstream partition got, including those that sent it nothing (see ``docs/concepts/watermarks.md``).
    """

    __slots__ = (
        "_due",
        "_progress",
        "_sent",
        "at_closes",
        "fn",
        "partitions",
        "progress_at_entry",
        "release",
        "stamp",
        "urgent",
    )

    def __init__(
        self,
        node_id: str,
        fn: Callable[[Any], Any],
        topic: str,
        *,
        output: Output,
        dead: DeadLetters,
        partitions: int = 0,
        stamp: KeyByStamp | None = None,
        release: Callable[[float], float] | None = None,
        progress_at_entry: bool = False,
        at_closes: bool = False,
    ) -> None:
        super().__init__(node_id, topic, output, dead)
        self.fn = fn
        #: The reader of ``topic`` uses progress only to close windows whose closes ``release``
        #: knows (one tumbling or hopping window): progress that passes no close is held back,
        #: until one is passed, a keep-alive round or the worker's stop (see :meth:`broadcast_progress`).
        self.at_closes = at_closes and release is not None
        #: Partitions of ``topic`` to send progress records to; 0: its reader keeps no watermark.
        self.partitions = partitions
        #: Only stateless steps lie between the sub-topology's entry and this step, so every record
        #: run there is progress here, also one a filter drops on the way: the entry reports it
        #: (:class:`~cadenza.worker.engine.operators.progress.ProgressTap`), and :meth:`process` does not.
        self.progress_at_entry = progress_at_entry
        #: Per input partition, the largest event time handed to this step, and the largest sent.
        self._progress: dict[int, float] = {}
        self._sent: dict[int, float] = {}
        #: The context for the reader of ``topic`` (see
        #: :mod:`cadenza.worker.engine.context_stamps`); ``None``: none.
        self.stamp = stamp
        #: ``event time -> the first window close after it`` of the window reading ``topic``, given by
        #: plan assembly; None: no window downstream, progress only on the timer.
        self.release = release
        #: Per input partition, the event time from which its progress releases the next window
        #: downstream (known once its progress was sent).
        self._due: dict[int, float] = {}
        #: A record handed here since the last progress moved an input partition past its ``_due``: a
        #: window downstream may be waiting for this progress alone, so it should go out now (see
        #: :func:`progress_due`), not at the end of the interval.
        self.urgent = False

    def advance(self, partition: int, event_time: float) -> None:
        """Input ``partition`` got to ``event_time``: its next progress record says at least that."""
        progress = self._progress
        if event_time > progress.get(partition, _NEG_INF):
            progress[partition] = event_time
            if event_time >= self._due.get(partition, _INF):
                self.urgent = True

    def process(self, unit: Unit, key: Any, value: Any, event_time: float, window: Window | None) -> None:
        if self.partitions and not self.progress_at_entry:
            # Before the user's function: a record that fails is progress all the same.
            self.advance(unit.partition, event_time)
        seq = unit.emitted
        try:
            new_key = self.fn(value)
            key_bytes = encode_key(new_key)
            value_bytes = encode_record_value(value)
            headers: OutHeaders = [(ORIGIN_HEADER, pack_origin(unit.partition, unit.offset, seq, event_time))]
            stamp = self.stamp
            ctx = unit.ctx
            if stamp is not None and ctx is not None:  # derived from the record's event time: may refuse it
                headers.append((CONTEXT_HEADER, stamp(ctx, unit, event_time, value)))
        except UnsupportedValueError as exc:  # the user's value or key: refused here, not downstream
            self.dead.function_failed(
                unit, self.node_id, UnsupportedValueError(f"step {self.node_id!r}: {exc}")
            )
            return
        except KeyboardInterrupt:
            raise
        except BaseException as exc:
            self.dead.function_failed(unit, self.node_id, exc)
            return
        unit.emitted = seq + 1
        try:
            self.output.produce(self.topic, value_bytes, key_bytes, headers)
        except RecordTooLargeError as exc:
            self.dead.function_failed(unit, self.node_id, exc)
            return
        self.metrics.produced += 1

    def broadcast_progress(self, everything: bool = False) -> int:
        """Write a progress record to every partition of the topic for each input partition whose
        event time grew since the last call; returns how many were written.

        Called after the records it covers were produced (same producer, so each partition gets them
        first). With :attr:`at_closes`, growth that passes no window close downstream is held back
        unless ``everything`` (the worker's keep-alive rounds, every quarter of the idle timeout, and
        its stop): it would close nothing there, and every progress record is one per partition of
        the topic, for every input partition, each interval.
        """
        sent = self._sent
        release = self.release
        due = self._due
        hold = self.at_closes and not everything
        self.urgent = False
        written = 0
        for upstream, event_time in self._progress.items():
            if event_time <= sent.get(upstream, _NEG_INF):
                continue
            if hold and event_time < due.get(upstream, _NEG_INF):
                continue
            sent[upstream] = event_time
            if release is not None:
                due[upstream] = release(event_time)
            headers: OutHeaders = [(PROGRESS_HEADER, pack_progress(upstream, event_time))]
            for partition in range(self.partitions):
                self.output.produce(self.topic, None, None, headers, partition)
            written += self.partitions
        return written

    def heartbeat(self, upstream_partitions: Iterable[int]) -> int:
        """Progress records saying again how far each of ``upstream_partitions`` got, although it got
        no further; returns how many were written.

        For input partitions whose records wait in this worker (queued behind more urgent work,
        paused at their buffer share, or waiting for their state): a window downstream that hears
        nothing of such a partition for its idle timeout stops waiting for it, and the records
        that are only late in reaching this key_by would then be late there. A heartbeat restarts
        that timeout, as a record would, and claims nothing new: the event time last sent, or
        :data:`HEARTBEAT_FLOOR` before the first. A partition whose progress grew is left to
        :meth:`broadcast_progress`, which sends it anyway.
        """
        if not self.partitions:
            return 0
        progress, sent = self._progress, self._sent
        written = 0
        for upstream in upstream_partitions:
            got = progress.get(upstream)
            told = sent.get(upstream)
            if got is not None and (told is None or got > told):
                continue
            headers: OutHeaders = [
                (PROGRESS_HEADER, pack_progress(upstream, HEARTBEAT_FLOOR if told is None else told))
            ]
            for partition in range(self.partitions):
                self.output.produce(self.topic, None, None, headers, partition)
            written += self.partitions
        return written


class SinkOp(_Writer):
    """Encodes with the sink's codec and produces; window results become the JSON envelope
    described in :mod:`cadenza.worker.engine.wire` (a user's codec gets that envelope as a dict)."""

    __slots__ = (
        "_avro",
        "_produce",
        "avro_format",
        "codec",
        "format",
        "headers",
        "registry_client",
        "stamp",
        "user",
    )

    def __init__(
        self,
        node_id: str,
        topic: str,
        format: TopicFormat,
        *,
        output: Output,
        dead: DeadLetters,
        registry_client: SchemaRegistryLike | None = None,
        stamp: SinkStamp | None = None,
        codec: Codec | None = None,
    ) -> None:
        super().__init__(node_id, topic, output, dead)
        self.format = format
        #: With a registry, Avro values are written in the Confluent wire format (subject <topic>-value).
        self.registry_client = registry_client
        # JSON encodes any value (models, dicts, numbers) without a model; Avro needs the value's model,
        # known only from the first record of each type, so its codecs are made on first use.
        #: A codec that is not built in (``format`` is then ignored), called through the protocol.
        self.user: Codec | None = None
        self.avro_format = AvroFormat()
        if isinstance(codec, AvroFormat):
            format, self.avro_format = "avro", codec
        elif isinstance(codec, JsonFormat):
            format = "json"
        elif codec is not None:
            self.user = codec
        json = format == "json" and self.user is None
        self.codec: ValueCodec[Any] | None = codec_for("json") if json else None
        self._avro: dict[type, tuple[ValueCodec[Any], OutHeaders | None]] = {}
        self.headers: OutHeaders | None = None if output.trace_header is None else [output.trace_header]
        self._produce = output.producer_for(topic).produce
        #: Records each result's deadline and makes the context it carries on (see
        #: :mod:`cadenza.worker.engine.context_stamps`); ``None``: neither.
        self.stamp = stamp

    def process(self, unit: Unit, key: Any, value: Any, event_time: float, window: Window | None) -> None:
        codec = self.codec
        headers = self.headers
        try:
            key_bytes = None if key is None else encode_sink_key(key)
            if window is not None:
                if self.user is None:
                    value_bytes = encode_window_result(key, window, value)
                else:
                    value_bytes = self._user_encode(key, window, value)
            elif codec is not None:  # JSON, the common case, first
                value_bytes = codec.encode(value)
            elif self.user is not None:
                value_bytes = self._user_encode(key, None, value)
            else:
                avro, headers = self._avro_codec(value)
                value_bytes = avro.encode(value)
            stamp = self.stamp
            if stamp is not None:
                raw = stamp(unit, window, value)
                if raw is not None:
                    headers = (
                        [(CONTEXT_HEADER, raw)] if headers is None else [*headers, (CONTEXT_HEADER, raw)]
                    )
        except KeyboardInterrupt:
            raise
        except BaseException as exc:
            self.dead.function_failed(unit, self.node_id, exc)
            return
        output = self.output
        try:
            self._produce(self.topic, value_bytes, key_bytes, -1, headers=headers, on_delivery=output.deliver)
            output.epoch.unacked += 1
        except BufferError:
            try:
                output.produce(self.topic, value_bytes, key_bytes, headers)
            except RecordTooLargeError as exc:
                self.dead.function_failed(unit, self.node_id, exc)
                return
        except KafkaException as exc:  # over message.max.bytes (anything else is re-raised)
            self.dead.function_failed(unit, self.node_id, too_large(exc, self.topic, value_bytes, key_bytes))
            return
        self.metrics.produced += 1

    def _user_encode(self, key: Any, window: Window | None, value: Any) -> bytes:
        user = self.user
        assert user is not None
        if window is not None:
            value = {"key": key, "window_start": window.start, "window_end": window.end, "value": value}
        return encode_with(user, value)

    def _avro_codec(self, value: Any) -> tuple[ValueCodec[Any], OutHeaders | None]:
        kind = type(value)
        found = self._avro.get(kind)
        if found is None:
            if not issubclass(kind, BaseModel):
                raise EncodeError(
                    f"sink {self.topic!r} is Avro, which needs a pydantic model value; got {kind.__name__}",
                    error_type="TypeError",
                )
            codec = self.avro_format.bind(kind, self.topic, self.registry_client)
            codec_headers: OutHeaders = list(codec.headers())
            found = self._avro[kind] = (codec, codec_headers or None)
        return found
