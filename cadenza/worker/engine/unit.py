"""The unit of work: one decoded input record for one operator-partition.

This is what the deadline scheduler queues per operator-partition (a sub-topology and an input
partition) between the decode and the run stages, so it is a small slots object made once per
record and pipeline. It keeps the consumed :class:`~confluent_kafka.Message` instead of copying its
raw key, value and headers, because only the rare paths (dead letters, late records) read them and
the common path should not pay for building a header list per record.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from confluent_kafka import Message

from cadenza.infra.kafka.headers import AnyHeaders
from cadenza.scheduling.context import SchedulingContext

if TYPE_CHECKING:
    from cadenza.worker.engine.inflight import Pending
    from cadenza.worker.engine.wire import Origin

__all__ = ["Unit"]


@dataclass(slots=True, eq=False)
class Unit:
    """One record entering one sub-topology; fields are set once by the decoder (compared by identity:
    a step tells a unit it has seen from a new one with ``is``)."""

    # Built once per record, with the nine fields below passed positionally: the cheapest call.
    pipeline: str
    #: The step the record enters its sub-topology through (a source, or the key_by it was
    #: repartitioned by).
    node_id: str
    #: Where the consumed record was read: the sub-topology's input topic, its partition and offset.
    topic: str
    partition: int
    offset: int
    #: The decoded key and value (``None`` for a progress record, which carries neither).
    key: Any
    value: Any
    #: Seconds since the epoch; 0.0 when nothing downstream needs event time (it is not computed).
    event_time: float
    message: Message
    #: For records read from a repartition topic: where upstream they came from (see
    #: :mod:`cadenza.worker.engine.wire`); ``None`` for records read from a source topic.
    origin: Origin | None = None
    #: The scheduling context, set when the unit is admitted to the scheduler. Records of a
    #: partition admitted together may share one (see :mod:`cadenza.worker.engine.context_stamps`).
    ctx: SchedulingContext | None = None
    #: This record's own trace id, set with ``ctx``: a shared context carries only the trace id of
    #: the first record it was made for, so spans and outgoing contexts read this one.
    trace_id: int = 0
    #: ``perf_counter()`` when the unit was queued (its queue wait is measured from here).
    enqueued: float = 0.0
    #: The worker's idle clock when the record was fetched: what its window inputs' silence is
    #: measured on while it runs (see :mod:`cadenza.worker.engine.idle_clock`); ``None``: the time it runs.
    read_at: float | None = None
    #: How many records key_by steps produced from this unit so far: the next one's sequence number
    #: in its origin header. Kept on the unit, so a unit that emits again later (a processor's
    #: timer firing with the partition's last unit) continues its sequence, never repeats it.
    emitted: int = 0
    #: The consumed record's in-flight entry (see :mod:`cadenza.worker.engine.inflight`); the offset is
    #: committable once every unit of the record ran.
    pending: Pending | None = None

    @property
    def headers(self) -> AnyHeaders:
        """The consumed record's headers, read from the message only when asked for."""
        return self.message.headers()

    def __repr__(self) -> str:
        return (
            f"Unit({self.pipeline}/{self.node_id} {self.topic}[{self.partition}]@{self.offset} "
            f"key={self.key!r} event_time={self.event_time})"
        )
