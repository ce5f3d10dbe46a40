"""The unit of work: one decoded input record for one operator-partition.

This is what the deadline scheduler queues per operator-partition (a sub-topology and an input
partition) between the decode and the run stages, so it is a small slots object made once per
record and pipeline. It keeps the consumed :class:`~confluent_kafka.Message` instead of copying its
raw key, value and headers, because only the rare paths (dead letters, late records) read them and
the common path should not pay for building a header list per record.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from confluent_kafka import Message

from cadenza.infra.kafka.headers import AnyHeaders
from cadenza.scheduling.context import SchedulingContext

if TYPE_CHECKING:
    from cadenza.worker.inflight import Pending
    from cadenza.worker.wire import Origin

__all__ = ["Unit"]


class Unit:
    """One record entering one sub-topology; fields are set once by the decoder."""

    __slots__ = (
        "ctx",
        "emitted",
        "enqueued",
        "event_time",
        "key",
        "message",
        "node_id",
        "offset",
        "origin",
        "partition",
        "pending",
        "pipeline",
        "topic",
        "trace_id",
        "value",
    )

    def __init__(  # noqa: PLR0917 - built once per record; positional is the cheapest call
        self,
        pipeline: str,
        node_id: str,
        topic: str,
        partition: int,
        offset: int,
        key: Any,
        value: Any,
        event_time: float,
        message: Message,
    ) -> None:
        self.pipeline = pipeline
        self.node_id = node_id
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.key = key
        self.value = value
        #: Seconds since the epoch; 0.0 when nothing downstream needs event time (it is not computed).
        self.event_time = event_time
        self.message = message
        #: For records read from a repartition topic: where upstream they came from (see
        #: :mod:`cadenza.worker.wire`); ``None`` for records read from a source topic.
        self.origin: Origin | None = None
        #: The scheduling context, set when the unit is admitted to the scheduler. Records of a
        #: partition admitted together may share one (see :mod:`cadenza.worker.context_stamps`).
        self.ctx: SchedulingContext | None = None
        #: This record's own trace id, set with ``ctx``: a shared context carries only the trace id of
        #: the first record it was made for, so spans and outgoing contexts read this one.
        self.trace_id = 0
        #: ``perf_counter()`` when the unit was queued (its queue wait is measured from here).
        self.enqueued = 0.0
        #: How many records key_by steps produced from this unit so far: the next one's sequence number
        #: in its origin header. Kept on the unit, so a unit that emits again later (a processor's
        #: timer firing with the partition's last unit) continues its sequence, never repeats it.
        self.emitted = 0
        #: The consumed record's in-flight entry (see :mod:`cadenza.worker.inflight`); the offset is
        #: committable once every unit of the record ran.
        self.pending: Pending | None = None

    @property
    def headers(self) -> AnyHeaders:
        """The consumed record's headers, read from the message only when asked for."""
        return self.message.headers()

    def __repr__(self) -> str:
        return (
            f"Unit({self.pipeline}/{self.node_id} {self.topic}[{self.partition}]@{self.offset} "
            f"key={self.key!r} event_time={self.event_time})"
        )
