"""Stalls of the worker's loop: a round that kept every tenant's records waiting, and where it went.

A worker runs one loop for all its tenants (:meth:`~cadenza.worker.runtime.Worker.step`): fetch, admit,
run queued records for a slice (10 ms by default), commit when due, and round again. A record waits
for the loop to come back to the scheduler, so a round that takes much longer than a slice (a
collection over a large heap, a checkpoint or rebalance callback that blocked, a user function that
ran long, a restore slice that overran) is paid by every tenant, the urgent ones first. The latency
histograms show that it happened, not why: S1 runs saw an urgent tenant's queue wait p99 at 748 ms
once, with nothing in the logs.

So each round's phases are timed (a clock read at each phase's end: about ten per round, not per
record), and a round whose busy time passes ``threshold`` is a stall. Its busy time is the round's
time less a fetch that was allowed to wait for records (nothing was queued, so nothing waited on the
worker meanwhile; the rebalance callbacks that run inside such a fetch are not counted either). A
stall is counted under the phase that took longest (``cadenza_worker_stalls_total{phase}`` and its
seconds in ``cadenza_worker_stall_seconds_total{phase}``) and logged at WARNING with every phase's
time, at most once per ``log_every`` seconds (the line says how many stalls it stands for), so that
a worker that stalls all the time does not flood its log.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable

__all__ = ["FETCH", "LOG_EVERY_S", "PHASES", "LoopWatch"]

_log = logging.getLogger("cadenza.worker")

#: A round's phases, in the order they run (see :meth:`cadenza.worker.runtime.Worker.step`).
PHASES = (
    "freeze",  # freezing settled state out of the collector's walks
    "copies",  # reading warm copies of partitions about to move here
    "fetch",  # the consumers' calls, and the callbacks (rebalance, errors) that run inside them
    "admit",  # decoding the fetched records and queueing them
    "restore",  # a slice of reading changelogs back for newly assigned partitions
    "control",  # pausing and resuming partitions, applying feedback
    "run",  # running queued records, best priority first
    "timers",  # wall-clock timers of processors, progress records
    "checkpoint",  # flushing and committing what finished
    "publish",  # true rates, the activity trace
)
#: Index of the fetch in :data:`PHASES`.
FETCH = PHASES.index("fetch")
_RUN = PHASES.index("run")
#: The most often a stall is logged; the others are counted and summed into the next line.
LOG_EVERY_S = 10.0


class LoopWatch:
    """Times the phases of each round; counts and logs the rounds busy ``threshold`` seconds or more.

    The worker stores ``clock()`` into :attr:`marks` as a round goes: ``marks[0]`` at its start and
    ``marks[i + 1]`` at the end of phase ``i`` (every mark, every round, so that a phase that did
    nothing takes no time), then calls :meth:`end`.
    """

    __slots__ = (
        "_logged_at",
        "_unlogged",
        "clock",
        "log_every",
        "marks",
        "seconds",
        "stalls",
        "threshold",
    )

    def __init__(
        self,
        threshold: float,
        *,
        clock: Callable[[], float] = time.perf_counter,
        log_every: float = LOG_EVERY_S,
    ) -> None:
        if not threshold > 0.0 or not math.isfinite(threshold):
            raise ValueError(f"the stall threshold must be a positive number of seconds, got {threshold!r}")
        self.threshold = threshold
        #: The clock the worker reads into :attr:`marks` (seconds, monotonic).
        self.clock = clock
        self.log_every = log_every
        self.marks = [0.0] * (len(PHASES) + 1)
        #: Stalls and their busy seconds, by the phase that took longest (index into :data:`PHASES`).
        self.stalls = [0] * len(PHASES)
        self.seconds = [0.0] * len(PHASES)
        self._logged_at = -math.inf
        self._unlogged = 0

    def end(self, *, waited: bool, queued: int, run_detail: Callable[[], str | None] | None = None) -> bool:
        """Close the round just marked; True if it stalled.

        ``waited``: the fetch was allowed to wait for records (nothing queued), so its time is not
        busy time. ``queued``: the records held in the round (buffered at its start and fetched in it), for
        the log line.
        ``run_detail``: called only for a stall mostly spent running records, what the run says about
        itself (its slowest quantum).
        """
        marks = self.marks
        busy = marks[-1] - marks[0]
        if waited:
            busy -= marks[FETCH + 1] - marks[FETCH]
        if busy < self.threshold:
            return False
        self._stalled(busy, waited, queued, run_detail)
        return True

    def counts(self) -> dict[tuple[str, ...], float | int]:
        """``cadenza_worker_stalls_total`` by phase (every phase, 0 included)."""
        return {(phase,): n for phase, n in zip(PHASES, self.stalls, strict=True)}

    def stalled_seconds(self) -> dict[tuple[str, ...], float | int]:
        """``cadenza_worker_stall_seconds_total`` by phase."""
        return {(phase,): s for phase, s in zip(PHASES, self.seconds, strict=True)}

    def _stalled(
        self, busy: float, waited: bool, queued: int, run_detail: Callable[[], str | None] | None
    ) -> None:
        marks = self.marks
        took = [marks[i + 1] - marks[i] for i in range(len(PHASES))]
        if waited:
            took[FETCH] = 0.0
        longest = max(range(len(PHASES)), key=took.__getitem__)
        self.stalls[longest] += 1
        self.seconds[longest] += busy
        now = marks[-1]
        if now - self._logged_at < self.log_every:
            self._unlogged += 1
            return
        said = run_detail() if run_detail is not None and longest == _RUN else None
        spent = [f"{PHASES[i]} {took[i] * 1000.0:.0f}" for i in range(len(PHASES)) if took[i] >= 0.0005]
        more = f"; {self._unlogged} more since the last such line" if self._unlogged else ""
        _log.warning(
            "the worker's loop stalled for %.0f ms with %d records queued, most of it in %s%s (ms: %s)%s",
            busy * 1000.0,
            queued,
            PHASES[longest],
            f" ({said})" if said else "",
            ", ".join(spent),
            more,
        )
        self._logged_at = now
        self._unlogged = 0
