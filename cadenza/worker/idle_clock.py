"""The clock a window step's idle timeout runs on: physical time minus the time the worker stopped reading.

An input that delivers nothing for ``watermark_idle_timeout`` seconds stops holding its step's
watermark back (``docs/watermarks.md``). Silence the worker caused itself says nothing about the
input: while it runs a dead predecessor's records alone behind durable markers (the quarantine's
serial replay, ``docs/reliability.md``) it reads no other partition, and at high rates that lasted
tens of seconds (less since long ranges are replayed in chunks). Counted as silence, it timed out
inputs whose records were waiting in Kafka and made those records late (a full CI run saw four
re-keyed windows come out short after a SIGKILL). The same holds while newly assigned partitions
wait, paused, for their state (:mod:`cadenza.worker.restoring`). So this clock stands still while the
worker is stalled, and the timeout counts only time in which the worker was reading everything it
owns.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["IdleClock"]


class IdleClock:
    """Seconds of ``base`` time outside :meth:`stalled` stretches (monotonic, starts anywhere)."""

    __slots__ = ("_base", "_depth", "_since", "_stalled")

    def __init__(self, base: Callable[[], float] = time.monotonic) -> None:
        self._base = base
        self._stalled = 0.0
        self._since: float | None = None
        self._depth = 0

    def now(self) -> float:
        since = self._since
        return (self._base() if since is None else since) - self._stalled

    @contextmanager
    def stalled(self) -> Iterator[None]:
        """Time inside does not count (nested stretches count once)."""
        self.stall()
        try:
            yield
        finally:
            self.unstall()

    def stall(self) -> None:
        """Stop counting time until the matching :meth:`unstall` (stretches nest)."""
        if self._depth == 0:
            self._since = self._base()
        self._depth += 1

    def unstall(self) -> None:
        self._depth -= 1
        if self._depth == 0 and self._since is not None:
            self._stalled += self._base() - self._since
            self._since = None
