"""The Processor API: a user step with keyed state, timers and free emission, for what the DSL cannot say.

A processor is declared with :meth:`cadenza.pipelines.Stream.process` and run by the worker (and the
:class:`~cadenza.testing.PipelineDriver`) as one step among the others. The contract is small on
purpose: :meth:`Processor.init` once per operator-partition, :meth:`Processor.process` per record,
the two timer callbacks, and :meth:`Processor.close`. Everything else (state, timers, emitting) goes
through the :class:`ProcessorContext` the worker hands to ``init``.

This module is pure declaration: it loads nothing of the worker, so ``import cadenza`` stays light.
``docs/how-to/processor.md`` says what is guaranteed (state, timers, scheduling contexts, errors, restarts).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["Processor", "ProcessorContext", "ProcessorFactory", "ProcessorRecord"]


@dataclass(frozen=True, slots=True)
class ProcessorRecord:
    """One record as a processor sees it.

    ``timestamp`` is the record's event time (seconds since the epoch), as the source computes it;
    ``headers`` are the consumed Kafka record's headers (text names, raw bytes; a repeated name keeps
    its last value). After a ``key_by`` the consumed record is the repartition record, whose headers
    are cadenza's own: user headers do not cross a ``key_by``.
    """

    value: Any
    key: Any
    timestamp: float
    headers: Mapping[str, bytes | None]


class ProcessorContext(Protocol):
    """What a processor may use; handed to :meth:`Processor.init` and valid for the processor's life.

    ``key``, ``state``, the timer methods and ``forward`` refer to the record being processed, or in a
    timer callback to the timer's key; in ``init`` and ``close`` there is none, and they raise. A
    processor's changes (state, timers, forwards) take effect only when the call that made them
    returns: a call that raises leaves no trace but its dead letter.
    """

    @property
    def node_id(self) -> str:
        """The step's id in the compiled graph."""
        ...

    @property
    def partition(self) -> int:
        """The input partition this processor instance serves (one instance per partition)."""
        ...

    @property
    def key(self) -> Any:
        """The key of the current record (or timer)."""
        ...

    @property
    def state(self) -> Any:
        """The current key's state (``None`` when it has none); assign to replace it, ``None`` to clear it.

        Values must be what the changelog can store: JSON-like values (``None``, bool, int, float, str,
        lists, tuples, dicts) or pydantic models; anything else dead-letters the record.
        """
        ...

    @state.setter
    def state(self, value: Any) -> None: ...

    @property
    def watermark(self) -> float:
        """The step's event-time watermark on this partition (``-inf`` until known)."""
        ...

    def now(self) -> float:
        """The wall clock wall-clock timers are measured on (seconds since the epoch; virtual in tests)."""
        ...

    def schedule_event_timer(self, when: float) -> None:
        """Call :meth:`Processor.on_event_timer` for the current key once the watermark reaches ``when``."""
        ...

    def schedule_wall_clock_timer(self, when: float) -> None:
        """Call :meth:`Processor.on_wall_clock_timer` for the current key once ``now() >= when``."""
        ...

    def cancel_event_timer(self, when: float) -> None:
        """Forget the current key's event-time timer at ``when``, if there is one."""
        ...

    def cancel_wall_clock_timer(self, when: float) -> None:
        """Forget the current key's wall-clock timer at ``when``, if there is one."""
        ...

    def forward(self, value: Any, *, key: Any = ..., timestamp: float | None = None) -> None:
        """Emit ``value`` to the next steps, under the current key unless ``key`` is given, at event
        time ``timestamp``: by default the current record's, in an event-time timer the timer's time,
        in a wall-clock timer the step's watermark (the last record's event time before there is one).
        """
        ...


class Processor:
    """Base class of user processors; override what you need (every method has a no-op default).

    One instance per input partition of the step: created (``factory()``) and initialised when the
    partition first runs a record after its assignment, closed when the partition goes or the worker
    stops. Instance attributes are therefore per partition and are *not* durable: keep what must
    survive a restart in ``context.state``.
    """

    def init(self, context: ProcessorContext) -> None:
        """Called once before anything else; keep ``context`` to use it in the other calls."""

    def process(self, record: ProcessorRecord) -> None:
        """Called for each record, in offset order per partition."""

    def on_event_timer(self, key: Any, when: float) -> None:
        """An event-time timer of ``key`` fired: the watermark reached ``when``."""

    def on_wall_clock_timer(self, key: Any, when: float) -> None:
        """A wall-clock timer of ``key`` fired: the clock reached ``when``."""

    def close(self) -> None:
        """The instance is done (partition revoked, worker stopped); release what it holds."""


#: What :meth:`~cadenza.pipelines.Stream.process` takes: a :class:`Processor` subclass, or any
#: callable returning a fresh processor.
ProcessorFactory = Callable[[], Processor]
