"""The clock a window step's idle timeout runs on: physical time minus the time the worker stopped reading.

An input that delivers nothing for ``watermark_idle_timeout`` seconds stops holding its step's
watermark back (``docs/concepts/watermarks.md``). Silence the worker caused itself says nothing about the
input: while it runs a dead predecessor's records alone behind durable markers (the quarantine's
serial replay, ``docs/operations/reliability.md``) it reads no other partition, and at high rates that lasted
tens of seconds (less since long ranges are replayed in chunks). Counted as silence, it timed out
inputs whose records were waiting in Kafka and made those records late (a full CI run saw four
re-keyed windows come out short after a SIGKILL). The same holds while newly assigned partitions
wait, paused, for their state (:mod:`cadenza.worker.kafka.restoring`). So this clock stands still while the
worker is stalled, and the timeout counts only time in which the worker was reading everything it
owns.

The worker also stalls itself without saying so: a user function that blocks for a minute (a
remote call with a long timeout, say) keeps the loop from fetching, and every input of every
window goes quiet meanwhile; once the loop is back, the first record run would find them all timed
out and the records that waited in Kafka meanwhile late. So the clock also counts at most
``read_gap`` seconds of each stretch between two fetches (:meth:`fetch_started`,
:meth:`fetch_ended`): time inside a fetch is time the worker was listening and counts in full (also
a poll that waits for records), and a loop round between fetches normally takes far less than
``read_gap``.

And silence is measured on the fetch timeline, not the run timeline. A record's turn to run depends
on the scheduler: under load a lax pipeline's partition can wait seconds in the buffer behind
urgent work while the worker keeps fetching. Timed when it ran, the records that waited looked
like seconds of silence of every input they did not come from, although those inputs' next records
had been fetched right behind them; the first record run after such a wait could time them out,
and their queued records then went late. So the worker stamps each record with this clock when it
is fetched (``Unit.read_at``), and while a record runs the clock reads that stamp (:attr:`at`, set by
the executor). An input's silence is thus the time between fetching its last record and fetching
the record that finds it silent, whenever the two run. While the flow control keeps every
partition paused (the buffer is full, or the producer pushes back) the worker reads nothing, so
that time is a stall too.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["READ_GAP", "IdleClock"]

#: The worker's ``read_gap``: far above a loop round (milliseconds to tens of them), far below an idle
#: timeout (30 s by default). Cutting more is safe (an input times out later, never wrongly).
READ_GAP = 1.0


class IdleClock:
    """Seconds of ``base`` time outside :meth:`stalled` stretches and outside the part of each
    stretch between fetches beyond ``read_gap`` (monotonic, starts anywhere)."""

    __slots__ = ("_base", "_cut_from", "_depth", "_gap_from", "_read_gap", "_since", "_stalled", "at")

    def __init__(self, base: Callable[[], float] = time.monotonic, *, read_gap: float | None = None) -> None:
        if read_gap is not None and not read_gap > 0.0:
            raise ValueError(f"read_gap must be above 0 s, got {read_gap!r}")
        self._base = base
        self._read_gap = read_gap
        #: Time not counted so far: closed stalls and the cut-off parts of closed gaps between fetches.
        self._stalled = 0.0
        self._since: float | None = None
        self._depth = 0
        #: When the open gap between fetches began, and the base time from which it is cut off:
        #: ``read_gap`` later, pushed back by the stalls inside the gap (counted once, as stalls).
        #: Infinite while no gap is open (inside a fetch, before the first, without ``read_gap``).
        self._gap_from = math.inf
        self._cut_from = math.inf
        #: While a fetched record runs: this clock's reading when it was fetched, which :meth:`now`
        #: returns instead of the time (``None``: none runs, or it was not fetched by the worker).
        self.at: float | None = None

    def now(self) -> float:
        at = self.at
        if at is not None:
            return at
        since = self._since
        t = self._base() if since is None else since
        cut_from = self._cut_from
        return (t if t <= cut_from else cut_from) - self._stalled

    def fetch_started(self) -> None:
        """The worker asks its inputs for records: the gap since the last fetch closes."""
        since = self._since
        t = self._base() if since is None else since  # an open stall: counted up to its start
        if t > self._cut_from:
            self._stalled += t - self._cut_from
        self._gap_from = self._cut_from = math.inf

    def fetch_ended(self) -> None:
        """The fetch returned: a gap opens, which counts up to ``read_gap``."""
        read_gap = self._read_gap
        if read_gap is not None:
            t = self._base()
            self._gap_from = t
            self._cut_from = t + read_gap

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
        since = self._since
        if self._depth == 0 and since is not None:
            t = self._base()
            self._stalled += t - since
            self._since = None
            if self._cut_from < math.inf:  # the part of the stall inside the gap is no gap time
                self._cut_from += t - max(since, self._gap_from)
