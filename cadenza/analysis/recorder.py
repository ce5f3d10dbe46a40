"""The worker's side of the trace: intervals of its timeline, merged and sent in batches.

The worker calls :meth:`ActivityRecorder.record` with times it has already read (its loop measures
every poll, quantum and commit), so recording costs a comparison and an append per interval, never
a clock read or an encode per record. Adjacent intervals of the same kind and operator are merged,
which is what keeps a busy worker's trace small: a run of quanta of one operator is one activity.
Encoding and sending happen in :meth:`ActivityRecorder.poll` once ``linger`` seconds have passed.
"""

from __future__ import annotations

from collections.abc import Callable

from cadenza.analysis.activity import KINDS, MESSAGE, Activity
from cadenza.analysis.trace import encode_batch

__all__ = ["ActivityRecorder"]


class ActivityRecorder:
    """Collects one worker's activities and hands encoded batches to ``send``.

    ``merge_gap``: two intervals of the same kind and operator closer than this many seconds are one
    activity (the loop's bookkeeping between two quanta of one operator is not worth an edge).
    ``max_pending`` bounds memory if ``send`` is never reached (a worker stuck in one quantum); beyond
    it intervals are dropped and counted in ``dropped``, since a trace is a diagnosis aid and must never
    stall the worker.
    """

    __slots__ = (
        "_last",
        "_pending",
        "_sent_at",
        "dropped",
        "linger",
        "max_pending",
        "merge_gap",
        "send",
        "sent",
        "worker_id",
    )

    def __init__(
        self,
        worker_id: str,
        send: Callable[[bytes], None],
        *,
        linger: float = 1.0,
        max_pending: int = 50_000,
        merge_gap: float = 0.0005,
    ) -> None:
        if not (0.0 < linger < 3600.0):
            raise ValueError(f"activity linger must be in (0, 3600) seconds, got {linger!r}")
        if max_pending < 1:
            raise ValueError(f"max_pending must be at least 1, got {max_pending!r}")
        self.worker_id = worker_id
        self.send = send
        self.linger = linger
        self.max_pending = max_pending
        self.merge_gap = merge_gap
        self._pending: list[Activity] = []
        self._last: Activity | None = None
        self._sent_at: float | None = None
        self.dropped = 0
        self.sent = 0

    def record(self, kind: str, start: float, end: float, operator: str | None = None) -> None:
        """One interval of this worker's timeline; merged into the previous one when it continues it."""
        if kind not in KINDS or kind == MESSAGE:
            raise ValueError(f"cannot record a {kind!r} interval on a timeline")
        last = self._last
        if last is not None:
            start = max(start, last.end)  # one thread's clock reads never go back; clip a caller's overlap
            if last.kind == kind and last.operator == operator and start - last.end <= self.merge_gap:
                self._last = Activity(self.worker_id, last.start, max(end, start), kind, operator)
                return
            self._append(last)
        self._last = Activity(self.worker_id, start, max(end, start), kind, operator)

    def message(self, sender: str, sent: float, received: float, topic: str | None = None) -> None:
        """A record ``sender`` produced at ``sent`` that this worker fetched at ``received``."""
        self._append(Activity(sender, sent, max(sent, received), MESSAGE, None, self.worker_id, topic))

    def _append(self, activity: Activity) -> None:
        if len(self._pending) >= self.max_pending:
            self.dropped += 1
        else:
            self._pending.append(activity)

    def poll(self, now: float) -> None:
        """Send what is pending if ``linger`` has passed since the last send."""
        if self._sent_at is None:
            self._sent_at = now
        elif now - self._sent_at >= self.linger:
            self.flush()
            self._sent_at = now

    def flush(self) -> None:
        """Send everything recorded so far, the interval still growing included."""
        if self._last is not None:
            self._append(self._last)
            self._last = None
        if self._pending:
            batch, self._pending = self._pending, []
            self.send(encode_batch(self.worker_id, batch))
            self.sent += len(batch)
