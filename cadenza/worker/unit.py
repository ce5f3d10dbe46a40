"""The unit of work: one decoded input record for one operator-partition.

This is what the deadline scheduler will queue per operator-partition (``pipeline``, ``node_id``,
``partition``) between the decode and the run stages, so it is a small slots object made once per
record and pipeline. It keeps the consumed :class:`~confluent_kafka.Message` instead of copying its
raw key, value and headers, because only the rare paths (dead letters, late records) read them and
the common path should not pay for building a header list per record.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from confluent_kafka import Message

from cadenza.infra.kafka.headers import AnyHeaders

if TYPE_CHECKING:
    from cadenza.worker.wire import Origin

__all__ = ["Unit"]


class Unit:
    """One record entering one sub-topology; fields are set once by the decoder."""

    __slots__ = (
        "event_time",
        "key",
        "message",
        "node_id",
        "offset",
        "origin",
        "partition",
        "pipeline",
        "topic",
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

    @property
    def headers(self) -> AnyHeaders:
        """The consumed record's headers, read from the message only when asked for."""
        return self.message.headers()

    def __repr__(self) -> str:
        return (
            f"Unit({self.pipeline}/{self.node_id} {self.topic}[{self.partition}]@{self.offset} "
            f"key={self.key!r} event_time={self.event_time})"
        )
