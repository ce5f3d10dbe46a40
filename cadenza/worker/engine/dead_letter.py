"""Records the worker cannot or will not process: dead letters and late records.

A dead letter is the consumed record itself (its key, value and headers unchanged, so it can be
inspected and replayed) plus headers saying what went wrong and where it came from:

- ``cadenza-error``, ``cadenza-error-type``: the message and class of the failure (the names defined
  in :mod:`cadenza.schemas.errors`);
- ``cadenza-source-topic``, ``cadenza-source-partition``, ``cadenza-source-offset``: the consumed
  record's coordinates (the repartition topic, for steps after a ``key_by``);
- ``cadenza-operator``: the step that failed (the source step for a value that would not decode);
- ``cadenza-dead-letter-disposition``: ``not-processed`` (the record did not run: replay it once
  fixed), ``processed-with-fresh-context`` (a notice, see below: the record ran, do not replay it) or
  ``quarantined`` (a poison pill that was running at two deaths of its worker; see
  :mod:`cadenza.worker.reliability.quarantine_book`).

A record whose ``cadenza-ctx`` header is garbled still runs, with a fresh context as if it came from a
source (the header is scheduling metadata; the value is fine and is never lost), and the garbled
context counter says so. So that an operator can also find which records (and so which producer)
carried the garbage, the record is copied to the dead-letter topic too, as a *notice*: error type
``ContextHeaderError``, the entry step of the sub-topology that read it as the operator, and
disposition ``processed-with-fresh-context``. A missing header on a repartition topic is only counted.

A consumed record too large for the producer's ``message.max.bytes`` cannot be copied whole: its dead
letter keeps the headers above and the key, drops the value (and the original headers) and says so in
``cadenza-value-omitted`` (the value's size in bytes); the record itself stays readable at its
coordinates. Without the fallback the refused dead letter would stop the worker at that record on
every restart.

A pipeline declared with ``on_error="stop"`` gets no dead letters from its steps: a step that fails
raises :class:`PipelineStoppedError` instead, which the worker turns into stopping that pipeline at the
record (see :meth:`cadenza.worker.engine.engine.Engine.stop_pipeline`). Records that fail to decode are
dead-lettered in both modes.

A late record goes to the pipeline's late topic once per window it missed: key as a sink writes it,
value the record's value as JSON (unknown types as their ``str``), and headers with the operator, the
window, the record's event time and the watermark it was late for, plus the coordinates above.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

import pydantic_core
from confluent_kafka import Message

from cadenza.errors import CadenzaError
from cadenza.infra.metrics.prometheus import OperatorMetrics
from cadenza.operators import Late
from cadenza.scheduling.context import CONTEXT_HEADER
from cadenza.schemas import ERROR_HEADER, ERROR_TYPE_HEADER
from cadenza.worker.engine.counters import WorkerCounters
from cadenza.worker.engine.output import OutHeaders, Output, RecordTooLargeError
from cadenza.worker.engine.unit import Unit
from cadenza.worker.engine.wire import encode_sink_key

__all__ = [
    "CONTEXT_HEADER_ERROR",
    "DISPOSITION_HEADER",
    "EVENT_TIME_VALUE_HEADER",
    "NOT_PROCESSED",
    "OPERATOR_HEADER",
    "PROCESSED_WITH_FRESH_CONTEXT",
    "QUARANTINED",
    "QUARANTINED_ERROR",
    "SOURCE_OFFSET_HEADER",
    "SOURCE_PARTITION_HEADER",
    "SOURCE_TOPIC_HEADER",
    "VALUE_OMITTED_HEADER",
    "WATERMARK_HEADER",
    "WINDOW_END_HEADER",
    "WINDOW_START_HEADER",
    "DeadLetters",
    "PipelineStoppedError",
]

SOURCE_TOPIC_HEADER = "cadenza-source-topic"
SOURCE_PARTITION_HEADER = "cadenza-source-partition"
SOURCE_OFFSET_HEADER = "cadenza-source-offset"
OPERATOR_HEADER = "cadenza-operator"
WINDOW_START_HEADER = "cadenza-window-start"
WINDOW_END_HEADER = "cadenza-window-end"
EVENT_TIME_VALUE_HEADER = "cadenza-late-event-time"
WATERMARK_HEADER = "cadenza-watermark"
VALUE_OMITTED_HEADER = "cadenza-value-omitted"
DISPOSITION_HEADER = "cadenza-dead-letter-disposition"

#: Disposition of a record that did not run (replay it once the cause is fixed).
NOT_PROCESSED = b"not-processed"
#: Disposition of a notice: the record ran, with a fresh context in place of its garbled one.
PROCESSED_WITH_FRESH_CONTEXT = b"processed-with-fresh-context"
#: Error type of a notice for a garbled ``cadenza-ctx`` header.
CONTEXT_HEADER_ERROR = "ContextHeaderError"
#: Disposition of a poison pill: the record was running at two deaths of its worker, so it was not
#: run again (see :mod:`cadenza.worker.reliability.quarantine_book`). Replay it only once the cause is fixed.
QUARANTINED = b"quarantined"
#: Error type of a quarantined record.
QUARANTINED_ERROR = "Quarantined"

_MAX_MESSAGE = 2000


def _truncate(message: str) -> bytes:
    if len(message) > _MAX_MESSAGE:
        message = message[: _MAX_MESSAGE - 3] + "..."
    return message.encode("utf-8", "replace")


def _coordinates(topic: str, partition: int, offset: int) -> OutHeaders:
    return [
        (SOURCE_TOPIC_HEADER, topic.encode()),
        (SOURCE_PARTITION_HEADER, str(partition).encode()),
        (SOURCE_OFFSET_HEADER, str(offset).encode()),
    ]


def _original_headers(message: Message) -> OutHeaders:
    original = message.headers()
    if not original:
        return []
    pairs = original.items() if isinstance(original, dict) else original
    return list(pairs)


class PipelineStoppedError(CadenzaError):
    """A step of a pipeline declared ``on_error="stop"`` failed on a record.

    Raised through the operator chain, so nothing downstream of the failed step sees the record; the
    worker catches it per pipeline, so the other pipelines keep running.
    """

    def __init__(self, pipeline: str, node_id: str, unit: Unit, cause: BaseException) -> None:
        self.pipeline = pipeline
        self.node_id = node_id
        self.topic = unit.topic
        self.partition = unit.partition
        self.offset = unit.offset
        self.cause = cause
        super().__init__(
            f"pipeline {pipeline!r} stopped: step {node_id!r} failed on {unit.topic}[{unit.partition}]"
            f"@{unit.offset}: {type(cause).__name__}: {cause}"
        )


@dataclass(slots=True, eq=False)
class DeadLetters:
    """The dead-letter and late topics of one pipeline, and what its failed steps do."""

    dead_letter_topic: str
    late_topic: str
    output: Output
    counters: WorkerCounters
    _: KW_ONLY
    pipeline: str = ""
    #: ``on_error="stop"``: a failed step raises :class:`PipelineStoppedError` instead of dead-lettering.
    stop_on_error: bool = False
    #: ``step id -> its Prometheus series``: dead letters and late records are committed like any
    #: record, so these counters are the only place an operator sees them.
    metrics: Callable[[str], OperatorMetrics] | None = None
    _series: dict[str, OperatorMetrics] = field(init=False, default_factory=dict)

    def series(self, node_id: str) -> OperatorMetrics:
        """Where the records produced, dead letters and late records of step ``node_id`` are counted,
        once: its exported series, or (when the worker exports none) a series of this router's own. The
        worker's totals (:class:`WorkerCounters`) are sums over these."""
        series = self._series.get(node_id)
        if series is None:
            if self.metrics is not None:
                series = self.metrics(node_id)
            else:
                series = OperatorMetrics("", self.pipeline, node_id)
            self._series[node_id] = series
            self.counters.count_in(series)
        return series

    def decode_failed(
        self,
        message: Message,
        topic: str,
        partition: int,
        offset: int,
        *,
        node_id: str,
        error: str,
        error_type: str,
    ) -> None:
        """A consumed value (or key) that could not be decoded or validated."""
        self._send(message, topic, partition, offset, node_id=node_id, error=error, error_type=error_type)
        self.series(node_id).dead_letter("decode")

    def function_failed(self, unit: Unit, node_id: str, exc: BaseException) -> None:
        """A user function (or the encoding of what it returned) raised on ``unit``."""
        if self.stop_on_error:
            raise PipelineStoppedError(self.pipeline, node_id, unit, exc) from exc
        self._send(
            unit.message,
            unit.topic,
            unit.partition,
            unit.offset,
            node_id=node_id,
            error=f"{type(exc).__name__}: {exc}",
            error_type=getattr(exc, "error_type", None) or type(exc).__name__,
        )
        self.series(node_id).dead_letter("function")

    def context_garbled(self, message: Message, unit: Unit, node_id: str, raw: bytes) -> None:
        """A notice: ``message``'s ``cadenza-ctx`` header (``raw``) did not decode, so the record runs
        with a fresh context. Sent whatever ``on_error`` says: nothing failed, and the record is not held.
        """
        self._send(
            message,
            unit.topic,
            unit.partition,
            unit.offset,
            node_id=node_id,
            error=(
                f"the {CONTEXT_HEADER} header ({len(raw)} bytes) is garbled: it is not a scheduling "
                "context this worker can decode; the record was processed with a fresh context"
            ),
            error_type=CONTEXT_HEADER_ERROR,
            disposition=PROCESSED_WITH_FRESH_CONTEXT,
        )
        self.series(node_id).dead_letter("context")

    def quarantined(
        self, message: Message, topic: str, partition: int, offset: int, *, node_id: str, why: str
    ) -> None:
        """A poison pill: the record was running at two deaths of its worker and is not run again."""
        self._send(
            message,
            topic,
            partition,
            offset,
            node_id=node_id,
            error=why,
            error_type=QUARANTINED_ERROR,
            disposition=QUARANTINED,
        )
        self.series(node_id).dead_letter("quarantined")

    def _send(
        self,
        message: Message,
        topic: str,
        partition: int,
        offset: int,
        *,
        node_id: str,
        error: str,
        error_type: str,
        disposition: bytes = NOT_PROCESSED,
    ) -> None:
        ours: OutHeaders = [
            (ERROR_HEADER, _truncate(error)),
            (ERROR_TYPE_HEADER, error_type.encode("utf-8", "replace")),
            *_coordinates(topic, partition, offset),
            (OPERATOR_HEADER, node_id.encode()),
            (DISPOSITION_HEADER, disposition),
        ]
        value = message.value()
        try:
            self.output.produce(
                self.dead_letter_topic, value, message.key(), _original_headers(message) + ours
            )
            return
        except RecordTooLargeError:
            ours.append((VALUE_OMITTED_HEADER, str(len(value or b"")).encode()))
        try:
            self.output.produce(self.dead_letter_topic, None, message.key(), ours)
        except RecordTooLargeError:  # the key alone is too large: the coordinates still find the record
            self.output.produce(self.dead_letter_topic, None, None, ours)

    def late(self, unit: Unit, node_id: str, late: Late, value: Any, watermark: float) -> None:
        """``value`` (keyed ``late.key``) arrived after ``late.window`` had closed."""
        try:
            key = encode_sink_key(late.key)
        except Exception:
            key = None
        try:
            payload = pydantic_core.to_json(
                value, serialize_unknown=True, bytes_mode="base64", inf_nan_mode="null"
            )
        except Exception:  # a value JSON cannot hold even with fallbacks (a cycle, say)
            payload = repr(value).encode("utf-8", "replace")
        headers = _coordinates(unit.topic, unit.partition, unit.offset)
        headers.append((OPERATOR_HEADER, node_id.encode()))
        headers.append((WINDOW_START_HEADER, repr(late.window.start).encode()))
        headers.append((WINDOW_END_HEADER, repr(late.window.end).encode()))
        headers.append((EVENT_TIME_VALUE_HEADER, repr(late.event_time).encode()))
        headers.append((WATERMARK_HEADER, repr(watermark).encode()))
        try:
            self.output.produce(self.late_topic, payload, key, headers)
        except RecordTooLargeError:
            headers.append((VALUE_OMITTED_HEADER, str(len(payload)).encode()))
            self.output.produce(self.late_topic, None, None, headers)
        self.series(node_id).late += 1
