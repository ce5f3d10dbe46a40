"""The cyclic garbage collector's settings while a worker runs.

A queued record is about four objects the collector tracks (its unit, its pending-offset entry, the
decoded model and its fields) that live until the record has run, so with thousands buffered every
young-generation pass at CPython's default threshold (700 allocations) walks thousands of live records
and finds nothing, and each middle- and old-generation pass walks the whole heap: the worker's plan,
its clients, the imported modules. ``benchmarks/scenarios/bench_hot_path.py`` measured about 5 us
per record of collector time under ``cameo`` with 20,000 records buffered
(``benchmarks/results/2026-11-26/NOTES.md``, "The hot path after the collector settings and pending
runs"), against none when each record runs at once.

So while a worker runs: what is alive once its plan is built is frozen (``gc.freeze``: moved out of
the generations the collector walks; it stays alive anyway), and the young generation's threshold is
raised (``gc_young_threshold``). The cost is memory: a reference cycle that became garbage is freed
after up to that many allocations instead of 700, and garbage present when the worker starts waits
until the last worker of the process closes (then everything is unfrozen). The settings are the
process's, so they are counted: the first worker to start saves the interpreter's own and the last to
close puts them back; a worker in between keeps the highest threshold asked for.

**State is frozen as it settles.** A worker's keyed state is long-lived and can be millions of
objects, and every old-generation pass walks all of them to find nothing: with a million keys of
window state such a pass took 0.3-0.9 s while the state was built and 1.7-1.9 s after a migration
installed half a million restored keys (``benchmarks/scenarios/bench_migration.py``;
``benchmarks/results/2026-11-27/NOTES.md``, "The garbage collector over a million keys"), a stall of
every tenant's records. So while held, what survives a full collection, and what is alive after a
block of state was restored or copied, is frozen too (:meth:`GcTuning.settle`, called by the worker
between fetch rounds, never inside the collector's own callback): an old-generation pass then walks
only what became long-lived since the last freeze. The price is the same as above, larger: a
reference cycle among frozen objects that becomes garbage is freed only when the last worker closes.
Objects that stop being referenced are still freed at once (reference counting); state entries are
not cyclic.
"""

from __future__ import annotations

import gc
import logging
import threading
import time

__all__ = ["FREEZE_EVERY", "LONG_PAUSE_S", "GcTuning"]

_log = logging.getLogger("cadenza.worker")

#: Restored keys or copied records after which :meth:`GcTuning.settle` freezes without waiting for a
#: full pass (a frozen young reference cycle is freed only when the last worker closes, so not at
#: every fetch round).
FREEZE_EVERY = 10_000
#: A full collection that stopped the worker this long is logged (a warning: every tenant waited).
LONG_PAUSE_S = 0.1


class _Process:
    """Workers holding the tuning, and the thresholds to restore when the last one lets go."""

    lock = threading.Lock()
    holders: list[int] = []  # noqa: RUF012 - one per process, on purpose
    saved: tuple[int, int, int] | None = None
    #: Full (old-generation) collections seen while held, counted by :func:`_count_full_passes`.
    full_passes = 0
    #: When the running full collection started, and the longest one since :meth:`GcTuning.settle`
    #: last looked (seconds).
    pass_started = 0.0
    longest = 0.0


def _count_full_passes(phase: str, info: dict[str, int]) -> None:
    """``gc.callbacks`` entry: count and time full collections (freezing and logging happen outside
    the collector, in :meth:`GcTuning.settle`)."""
    if info["generation"] != 2:
        return
    if phase == "start":
        _Process.pass_started = time.perf_counter()
    else:
        _Process.full_passes += 1
        _Process.longest = max(_Process.longest, time.perf_counter() - _Process.pass_started)


class GcTuning:
    """One worker's hold on the process's collector settings (idempotent :meth:`acquire`/:meth:`release`)."""

    __slots__ = ("_full_passes", "_restored", "freezes", "held", "long_pause", "longest_pause", "young")

    def __init__(self, young: int, *, long_pause: float = LONG_PAUSE_S) -> None:
        #: Young-generation threshold while held; 0 leaves the interpreter's thresholds and freezes nothing.
        self.young = young
        self.held = False
        #: Full collections that stopped the worker at least this long are logged by :meth:`settle`.
        self.long_pause = long_pause
        #: The longest full collection :meth:`settle` has seen (seconds; for diagnosis).
        self.longest_pause = 0.0
        #: Freezes made by :meth:`settle` (for tests and diagnosis).
        self.freezes = 0
        self._full_passes = 0
        self._restored = 0

    def acquire(self) -> None:
        """Freeze what is alive now and raise the young threshold; call once the plan is built."""
        if self.held or self.young == 0:
            return
        with _Process.lock:
            if not _Process.holders:
                _Process.saved = gc.get_threshold()
                gc.callbacks.append(_count_full_passes)
            _Process.holders.append(self.young)
            current = gc.get_threshold()
            if current[0] != 0 and current[0] < self.young:  # 0: collection disabled by the user
                gc.set_threshold(self.young, current[1], current[2])
            gc.freeze()
            self._full_passes = _Process.full_passes
            self.held = True

    def settle(self, restored: int) -> None:
        """Freeze what is alive if a full collection ran, or ``FREEZE_EVERY`` more state was restored,
        since the last freeze.

        ``restored``: a count that grows as the worker restores, installs or copies state (keys
        restored, warm-copy records read): a block of long-lived objects the next full pass would walk.
        A small restore waits for the next full pass. Between fetch rounds: two comparisons when
        nothing happened.
        """
        if not self.held:
            return
        passes = _Process.full_passes
        if passes == self._full_passes and restored - self._restored < FREEZE_EVERY:
            return
        if passes != self._full_passes:
            pause, _Process.longest = _Process.longest, 0.0
            self.longest_pause = max(self.longest_pause, pause)
            if pause >= self.long_pause:
                _log.warning(
                    "a full garbage collection stopped the worker for %.0f ms; what survived it is "
                    "frozen now, so the next one walks only what is new",
                    pause * 1000.0,
                )
        self._full_passes, self._restored = passes, restored
        gc.freeze()
        self.freezes += 1

    def release(self) -> None:
        """Let go; the last holder unfreezes and restores the thresholds it found."""
        if not self.held:
            return
        with _Process.lock:
            self.held = False
            _Process.holders.remove(self.young)
            if not _Process.holders:
                if _Process.saved is not None:
                    gc.set_threshold(*_Process.saved)
                    _Process.saved = None
                if _count_full_passes in gc.callbacks:
                    gc.callbacks.remove(_count_full_passes)
                gc.unfreeze()
