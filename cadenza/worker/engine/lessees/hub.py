"""Every parallel step's lessees on one worker: the core budget, the warm pool, the result queue.

The hub is pumped by the engine between quanta (:meth:`LesseeHub.pump`): it drains what lessees
said (outcomes, readiness, deaths) and ticks each step (timeouts, leases, batches, releases). Nothing
here blocks: the lessor only waits on lessees in :meth:`wait`, when it has nothing else to do.

The budget: process lessees leased at once are at most ``cores - 1`` (the lessor is a core too);
thread lessees, which block rather than compute, at most ``max_threads``. A small pool of process
lessees is started ahead (``warm``) and topped up after a lease while another lease could follow,
so a lease binds a running interpreter and never starts one on the hot path; a process given back
stays in the pool while the budget could lease it again (processes are started once, not per burst).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import queue
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from cadenza.worker.engine.lessees.leased_step import LeasedStep
from cadenza.worker.engine.lessees.leasing import LeaseRules
from cadenza.worker.engine.lessees.lessee import DIED, READY, Lessee, ProcessLessee, Results, ThreadLessee

if TYPE_CHECKING:
    from collections import deque

    from cadenza.pipelines.parallel import ParallelSpec
    from cadenza.worker.engine.lessees.leased_step import Call

__all__ = ["LesseeHub"]

_log = logging.getLogger("cadenza.worker")


def _nothing_queued(_topic: str, _partition: int) -> int:
    return 0


#: Seconds the lessor runs queued calls itself when it has nothing else to run, per engine round.
HELP_SLICE = 0.005


class LesseeHub:
    """The lessees of one worker; built before its pipelines' operators, which register their steps."""

    def __init__(
        self,
        *,
        cores: int,
        max_threads: int = 16,
        warm: int = 1,
        idle_release: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.process_cap = max(cores - 1, 1)
        self.thread_cap = max_threads
        self.warm_target = warm
        self.idle_release = idle_release
        self.clock = clock
        self.wall = wall
        self.results: Results = queue.SimpleQueue()
        self.steps: list[LeasedStep] = []
        self.warm: list[ProcessLessee] = []
        self.retired: list[Lessee] = []
        self.leased = {"process": 0, "thread": 0}
        self._ids = itertools.count(1)
        self._tokens = itertools.count(1)
        self._early: list[tuple[Lessee, Any]] = []
        self.started = False
        #: ``(topic, partition) -> records queued in the scheduler``: the work behind a call a step
        #: runs on the lessor (set by the engine that pumps this hub; nothing queued until then).
        self.queued: Callable[[str, int], int] = _nothing_queued

    # -- building --------------------------------------------------------------------------------

    def step(
        self,
        *,
        tenant: str,
        pipeline: str,
        node_id: str,
        kind: int,
        fn: Callable[[Any], Any],
        spec: ParallelSpec,
        release: Callable[[deque[Call]], None],
    ) -> LeasedStep:
        """Register a parallel step; its lessees are leased from :meth:`start` on."""
        cap = self.process_cap if spec.executor == "process" else self.thread_cap
        if spec.lessees is None:
            rules = LeaseRules(floor=0, cap=cap, idle_release=self.idle_release)
        else:
            if spec.lessees > cap:
                _log.warning(
                    "pipeline %s, step %s asks for %d %s lessees; the worker's budget allows %d at once "
                    "(raise cores or max_thread_lessees for more)",
                    pipeline,
                    node_id,
                    spec.lessees,
                    spec.executor,
                    cap,
                )
            rules = LeaseRules(floor=spec.lessees, cap=spec.lessees, idle_release=self.idle_release)
        step = LeasedStep(
            self,
            tenant=tenant,
            pipeline=pipeline,
            node_id=node_id,
            kind=kind,
            fn=fn,
            spec=spec,
            release=release,
            rules=rules,
        )
        self.steps.append(step)
        return step

    def start(self) -> None:
        """Start the warm pool (if a step may lease processes) and the steps' fixed lessees."""
        if self.started or not self.steps:
            return
        self.started = True
        if any(step.executor == "process" for step in self.steps):
            self._top_up()
        now = self.clock()
        for step in self.steps:
            step.tick(now, self.wall())

    # -- the budget ------------------------------------------------------------------------------

    def free(self, executor: str) -> bool:
        cap = self.process_cap if executor == "process" else self.thread_cap
        return self.leased[executor] < cap

    def lease(self, step: LeasedStep, now: float) -> Lessee | None:
        """A lessee for ``step``, bound and counted; ``None`` if none can be had."""
        lessee: Lessee
        if step.executor == "process":
            lessee = self.warm.pop() if self.warm else self._start_process()
            lessee.bind(step.kind, step.fn_bytes)
            if self.leased["process"] + 1 < self.process_cap:
                self._top_up()  # a warm one for the next lease, if there can be one
        else:
            lessee = ThreadLessee(next(self._ids), self.results)
            lessee.start()
        lessee.step = step
        lessee.leased_at = now
        lessee.idle_since = now
        step.lessees.append(lessee)
        self.leased[step.executor] += 1
        return lessee

    def give_back(self, lessee: Lessee, now: float) -> None:
        """A step releases an idle lessee: to the warm pool while it is short, else it ends."""
        step = lessee.step
        if step is not None and lessee in step.lessees:
            step.lessees.remove(lessee)
            self.ended(lessee, step, now)
        lessee.step = None
        # Kept warm while the budget could lease it again: a burst that comes back then binds it
        # instead of starting an interpreter (a second of CPU on a small host) for the pool.
        keep = self.warm_target + self.process_cap - self.leased["process"]
        if isinstance(lessee, ProcessLessee) and len(self.warm) < keep:
            self.warm.append(lessee)
        else:
            lessee.stop()
            self.retire(lessee)

    def ended(self, lessee: Lessee, step: LeasedStep, now: float | None = None) -> None:
        """A lease ended (given back, died, killed): its seconds counted, its slot free."""
        at = self.clock() if now is None else now
        step.stats.closed_seconds += max(0.0, at - lessee.leased_at)
        self.leased[step.executor] -= 1

    def retire(self, lessee: Lessee) -> None:
        lessee.retired = True
        self.retired.append(lessee)

    def token(self) -> int:
        return next(self._tokens)

    def _start_process(self) -> ProcessLessee:
        lessee = ProcessLessee(next(self._ids), self.results)
        lessee.start()
        return lessee

    def _top_up(self) -> None:
        while len(self.warm) < self.warm_target:
            self.warm.append(self._start_process())

    # -- the pump --------------------------------------------------------------------------------

    @property
    def releases(self) -> int:
        """Calls released so far, over the steps."""
        return sum(step.releases for step in self.steps)

    @property
    def held(self) -> int:
        """Calls accepted by parallel steps and not yet released: records the worker still holds."""
        return sum(step.held for step in self.steps)

    def pump(self) -> None:
        """Take in what lessees said, then tick every step; never waits."""
        now = self.clock()
        early = self._early
        while early:
            self._take(*early.pop(0), now)
        results = self.results
        while True:
            try:
                lessee, message = results.get_nowait()
            except queue.Empty:
                break
            self._take(lessee, message, now)
        wall = self.wall()
        for step in self.steps:
            step.tick(now, wall)
        if self.retired:
            self._reap()

    def _take(self, lessee: Lessee, message: Any, now: float) -> None:
        if message == READY:
            lessee.ready = True
            return
        step = lessee.step
        if message == DIED:
            if lessee in self.warm:
                self.warm.remove(lessee)
                self._top_up()
            elif step is not None and not lessee.retired:
                self.retire(lessee)
                step.on_death(lessee, now)
            return
        if lessee.retired or step is None:
            return  # an abandoned thread's late answer, or a batch of a lease since ended
        token, outcomes, seconds = message
        step.on_result(lessee, token, outcomes, seconds, now)

    def help(self) -> int:
        """The lessor has nothing queued: it runs queued calls of process steps for a short slice."""
        until = time.perf_counter() + HELP_SLICE
        ran = 0
        for step in self.steps:
            if step.queue:
                ran += step.help(until)
        return ran

    def wait(self, timeout: float) -> None:
        """Wait up to ``timeout`` for a lessee to say something (the lessor has nothing else to do)."""
        if self._early:
            return
        with contextlib.suppress(queue.Empty):
            self._early.append(self.results.get(timeout=timeout))

    def ready(self, timeout: float) -> bool:
        """Wait until every lessee started so far can take work (the first ones start with an
        interpreter each); whether they all could within ``timeout``."""
        until = time.monotonic() + timeout
        while True:
            self.pump()
            lessees = [*self.warm, *(lessee for step in self.steps for lessee in step.lessees)]
            if all(lessee.ready for lessee in lessees):
                return True
            left = until - time.monotonic()
            if left <= 0:
                return False
            self.wait(min(left, 0.05))

    def _reap(self) -> None:
        self.retired = [
            lessee for lessee in self.retired if isinstance(lessee, ProcessLessee) and not lessee.reaped()
        ]

    # -- ends ------------------------------------------------------------------------------------

    def close(self, grace: float = 1.0) -> None:
        """End every lessee: processes are asked to stop, then killed after ``grace`` seconds."""
        lessees: list[Lessee] = [*self.warm]
        for step in self.steps:
            lessees.extend(step.lessees)
            now = self.clock()
            for lessee in list(step.lessees):
                self.ended(lessee, step, now)
            step.lessees.clear()
        self.warm.clear()
        for lessee in lessees:
            lessee.stop()
        deadline = time.monotonic() + grace
        for lessee in [*lessees, *self.retired]:
            if isinstance(lessee, ProcessLessee):
                lessee.process.join(max(0.0, deadline - time.monotonic()))
                if lessee.process.is_alive():
                    lessee.kill()
                    lessee.process.join(1.0)
        self.retired.clear()
