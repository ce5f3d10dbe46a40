"""A stand-in for the worker's :class:`~cadenza.worker.engine.output.Output` in tests of operators and tasks
run without a broker: it keeps what would have been produced, in order.

One class for every such test, so that a method the operators start asking of their output (as
``producer_for`` was, when produce lanes came) is added once, here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from cadenza.worker.engine.output import Output

__all__ = ["Produced", "RecordingOutput"]


@dataclass(frozen=True)
class Produced:
    topic: str
    value: bytes | None
    key: bytes | None
    headers: dict[str, bytes]
    #: -1: the partitioner's choice.
    partition: int = -1


class RecordingOutput:
    """Every topic goes through this one object: it is its own producer (``producer``,
    ``producer_for``), and whatever is produced through it lands in :attr:`records`."""

    #: No activity trace.
    trace_header: tuple[str, bytes] | None = None

    def __init__(self) -> None:
        self.records: list[Produced] = []
        #: What a sink writes through (a test may put a producer of its own here).
        self.producer: Any = self

    def producer_for(self, topic: str) -> Any:
        return self.producer

    def produce(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        headers: Any = None,
        partition: int = -1,
        **_: Any,
    ) -> None:
        self.records.append(Produced(topic, value, key, dict(headers or []), partition))

    @property
    def topics(self) -> list[str]:
        """The topics of :attr:`records`, in order."""
        return [record.topic for record in self.records]

    def as_output(self) -> Output:
        """This object where the code under test expects an :class:`Output`."""
        return cast(Output, self)
