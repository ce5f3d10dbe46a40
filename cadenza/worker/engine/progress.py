"""Progress records and heartbeats: how a key_by tells the windows downstream of it how far its
inputs got, when it has no record to say so (see ``docs/concepts/watermarks.md``).

A window at a repartition partition that gets no records from some upstream input partition closes
only once news of that partition arrives; :class:`ProgressSender` sends that news at most once per
``interval`` (and after each quantum when one is due), and heartbeats for the input partitions whose
records wait in this worker (queued, paused or waiting for their state): their silence downstream is
the worker's doing, not their input's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from cadenza.worker.engine.counters import WorkerCounters
from cadenza.worker.engine.operators.routing import KeyByOp, progress_due

__all__ = ["HEARTBEAT_SHARE", "ProgressSender", "Waiting"]

#: A key_by's heartbeats for input partitions whose records wait in the worker go out every this
#: share of the idle timeout (at least every ``interval``): a window downstream hears of them
#: several times before it would time them out.
HEARTBEAT_SHARE = 0.25

#: The assigned input partitions of a topic whose records wait in the worker: queued, paused or
#: waiting for their state (the transport knows the last two, the engine does not).
Waiting = Callable[[str], Sequence[int]]


class ProgressSender:
    """Sends the key_bys' progress records and heartbeats on time."""

    __slots__ = (
        "_counters",
        "_held",
        "_idle_timeout",
        "_inputs",
        "_interval",
        "_last",
        "_next_heartbeat",
        "_waiting",
        "keyed",
    )

    def __init__(
        self,
        inputs: Sequence[tuple[KeyByOp, str]],
        counters: WorkerCounters,
        *,
        interval: float,
        idle_timeout: float | None,
        waiting: Waiting,
        held: Mapping[str, int],
    ) -> None:
        #: Each key_by with the topic its sub-topology reads (whose partitions it reports on).
        self._inputs = tuple(inputs)
        self.keyed = [op for op, _ in self._inputs]
        self._counters = counters
        self._interval = interval
        self._idle_timeout = idle_timeout
        self._waiting = waiting
        self._held = held
        self._last = 0.0
        self._next_heartbeat = 0.0

    def due(self, now: float) -> bool:
        return bool(self.keyed) and progress_due(self.keyed, now - self._last, self._interval)

    def send(self, now: float, *, everything: bool = False) -> None:
        """Progress records for the repartition topics, at most once per ``interval``: after the
        records they cover, and not waited for (the next commit's flush acknowledges them), so that
        the loop never waits on a broker round trip for them alone.

        The interval bounds how long a downstream window waits to hear of an upstream partition that
        sends it no records: it adds up to that much to such a window's close."""
        self._last = now
        idle_timeout = self._idle_timeout
        beat = idle_timeout is not None and now >= self._next_heartbeat
        counters = self._counters
        for keyed in self.keyed:
            # A keep-alive round also sends the growth held back between window closes.
            counters.progress_records += keyed.broadcast_progress(everything=everything or beat)
        if beat and idle_timeout is not None:
            self._next_heartbeat = now + max(self._interval, idle_timeout * HEARTBEAT_SHARE)
            self._heartbeats()

    def _heartbeats(self) -> None:
        held, waiting = self._held, self._waiting
        for keyed, topic in self._inputs:
            if held and held.get(topic):
                continue  # a stopped pipeline's: its records never run, nor does what reads its key_by
            partitions = sorted(set(waiting(topic)))
            if partitions:
                self._counters.progress_records += keyed.heartbeat(partitions)
