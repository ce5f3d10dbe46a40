"""The cyclic garbage collector's settings while a worker runs.

A queued record is about four objects the collector tracks (its unit, its pending-offset entry, the
decoded model and its fields) that live until the record has run, so with thousands buffered every
young-generation pass at CPython's default threshold (700 allocations) walks thousands of live records
and finds nothing, and each middle- and old-generation pass walks the whole heap: the worker's plan,
its clients, the imported modules. ``benchmarks/bench_hot_path.py`` measured about 5 us per record
of collector time under ``cameo`` with 20,000 records buffered (RESULTS.md, "Hot path"), against
none when each record runs at once.

So while a worker runs: what is alive once its plan is built is frozen (``gc.freeze``: moved out of
the generations the collector walks; it stays alive anyway), and the young generation's threshold is
raised (``gc_young_threshold``). The cost is memory: a reference cycle that became garbage is freed
after up to that many allocations instead of 700, and garbage present when the worker starts waits
until the last worker of the process closes (then everything is unfrozen). The settings are the
process's, so they are counted: the first worker to start saves the interpreter's own and the last to
close puts them back; a worker in between keeps the highest threshold asked for.
"""

from __future__ import annotations

import gc
import threading

__all__ = ["GcTuning"]


class _Process:
    """Workers holding the tuning, and the thresholds to restore when the last one lets go."""

    lock = threading.Lock()
    holders: list[int] = []  # noqa: RUF012 - one per process, on purpose
    saved: tuple[int, int, int] | None = None


class GcTuning:
    """One worker's hold on the process's collector settings (idempotent :meth:`acquire`/:meth:`release`)."""

    __slots__ = ("held", "young")

    def __init__(self, young: int) -> None:
        #: Young-generation threshold while held; 0 leaves the interpreter's thresholds and freezes nothing.
        self.young = young
        self.held = False

    def acquire(self) -> None:
        """Freeze what is alive now and raise the young threshold; call once the plan is built."""
        if self.held or self.young == 0:
            return
        with _Process.lock:
            if not _Process.holders:
                _Process.saved = gc.get_threshold()
            _Process.holders.append(self.young)
            current = gc.get_threshold()
            if current[0] != 0 and current[0] < self.young:  # 0: collection disabled by the user
                gc.set_threshold(self.young, current[1], current[2])
            gc.freeze()
            self.held = True

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
                gc.unfreeze()
