"""One parallel step's side of the lessees: its queue in priority order, its lessees, its batches.

The operator (:class:`~cadenza.worker.engine.operators.parallel_step.ParallelOp`) hands every record
it cannot run at once to :meth:`LeasedStep.accept` as a :class:`Call`. Calls wait here ordered by
their start deadline (the order the scheduler itself runs by, so lessees take work in priority
order), go to an idle lessee in batches, and come back marked done; the operator then releases its
lanes (one per input partition) in offset order. A call's outcome is final once it is marked: a
failure, a call past ``timeout`` (:class:`StepTimeout`) and a call that killed two lessees
(:class:`LesseeDied`) are dead-lettered by the operator, as a plain step dead-letters a failure.

A lessee that dies or is killed loses its batch's outcomes, so those calls go back into the queue
and run again on another lessee; only the call that was running when it died is blamed (once
twice, it is dead-lettered instead of killing a third).
"""

from __future__ import annotations

import heapq
import math
import pickle
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from cadenza.errors import CadenzaError
from cadenza.scheduling.context import start_deadline
from cadenza.worker.engine.lessees.calls import FILTER, FLAT_MAP, Outcome
from cadenza.worker.engine.lessees.leasing import LeaseRules, Leasing, slack

if TYPE_CHECKING:
    from cadenza.operators import Window
    from cadenza.pipelines.parallel import ParallelSpec
    from cadenza.worker.engine.lessees.lessee import Lessee
    from cadenza.worker.engine.unit import Unit

__all__ = ["Call", "LeasedStep", "LesseeDied", "LesseeStats", "StepTimeout"]

#: Calls per batch to a process lessee, at most: enough to amortise the pickling and the pipe, few
#: enough that a lessee's death reruns little.
PROCESS_BATCH = 64
#: Weight of the newest batch in the per-call cost estimate.
COST_WEIGHT = 0.2


class StepTimeout(CadenzaError):  # noqa: N818 - the name is the dead letter's cadenza-error-type
    """A call of a step declared with ``timeout`` ran past it; its record is dead-lettered."""


class LesseeDied(CadenzaError):  # noqa: N818 - the name is the dead letter's cadenza-error-type
    """A call was running when two lessees died; its record is dead-lettered, not run a third time."""


class Call:
    """One record's call of a parallel step, from its acceptance to its release."""

    __slots__ = (
        "deaths",
        "done",
        "dropped",
        "event_time",
        "key",
        "lane",
        "ok",
        "result",
        "unit",
        "value",
        "window",
    )

    def __init__(  # noqa: PLR0917 - the operator's calling convention, plus the lane
        self, unit: Unit, key: Any, value: Any, event_time: float, window: Window | None, lane: deque[Call]
    ) -> None:
        self.unit = unit
        self.key = key
        self.value = value
        self.event_time = event_time
        self.window = window
        self.lane = lane
        self.done = False
        self.ok = True
        self.result: Any = None
        self.deaths = 0
        #: Its partition went, or its pipeline stopped: nothing is released for it.
        self.dropped = False


@dataclass(slots=True)
class LesseeStats:
    """What the metrics show of one step's lessees (leases and releases are :class:`Leasing`'s)."""

    timeouts: int = 0
    deaths: int = 0
    #: Thread lessees left running a call past its timeout.
    abandoned: int = 0
    #: Seconds the lessor spent handing batches over (pickling and writing), and the calls handed.
    handoff_seconds: float = 0.0
    handoff_calls: int = 0
    #: Calls the lessor ran itself (no lessee leased, or helping while it had nothing else to run).
    lessor_calls: int = 0
    #: Lessee-seconds of leases already given back (the live ones are added when read).
    closed_seconds: float = 0.0
    #: A window aggregate's: seconds the lessor spent merging lifted partials into its windows
    #: (closing the windows they complete included).
    merge_seconds: float = 0.0


class Leases(Protocol):
    """What a step asks of the hub: a lessee, its return, and the budget between."""

    def free(self, executor: str) -> bool: ...

    def lease(self, step: LeasedStep, now: float) -> Lessee | None: ...

    def give_back(self, lessee: Lessee, now: float) -> None: ...

    def ended(self, lessee: Lessee, step: LeasedStep, now: float | None = None) -> None: ...

    def retire(self, lessee: Lessee) -> None: ...

    def token(self) -> int: ...

    def queued(self, topic: str, partition: int) -> int: ...


class LeasedStep:
    """The lessees, queue and batches of one parallel step (one per step and worker)."""

    def __init__(
        self,
        hub: Leases,
        *,
        tenant: str,
        pipeline: str,
        node_id: str,
        kind: int,
        fn: Callable[[Any], Any],
        spec: ParallelSpec,
        release: Callable[[deque[Call]], None],
        rules: LeaseRules,
    ) -> None:
        self.hub = hub
        self.tenant = tenant
        self.pipeline = pipeline
        self.node_id = node_id
        self.kind = kind
        self.fn = fn
        self.spec = spec
        self.executor = spec.executor
        self.timeout = spec.timeout_s
        self.release_lane = release
        self.leasing = Leasing(rules)
        self.stats = LesseeStats()
        #: The lessor may run a call itself: a process step without a timeout (a thread step's calls
        #: block, and a call with a timeout must be where it can be abandoned).
        self.lessor_may_run = spec.executor == "process" and spec.timeout_s is None
        self.lessees: list[Lessee] = []
        self.queue: list[tuple[float, int, Call]] = []
        self.batches: dict[int, tuple[Lessee, list[Call]]] = {}
        self._seq = 0
        #: Calls accepted and not yet released or dropped.
        self.held = 0
        #: Calls released so far: work done that a checkpoint must see (a round may release calls
        #: and run nothing else).
        self.releases = 0
        #: Per-call seconds, from lessees' batches and the lessor's own calls.
        self.cost = 0.0
        #: The least slack a call run on the lessor had since the last tick (inline mode's signal).
        self.inline_slack = math.inf
        self.lanes_ready: list[deque[Call]] = []
        self._fn_bytes: bytes | None = None

    # -- on the operator's path ------------------------------------------------------------------

    @property
    def runs_inline(self) -> bool:
        """Whether the operator runs a call now, on the lessor (nothing leased, nothing queued)."""
        return self.lessor_may_run and not self.lessees and not self.queue and not self.batches

    def run_inline(self, unit: Unit, value: Any) -> Outcome:
        """One call on the lessor, timed into the cost estimate; its slack read for the leasing: its
        start deadline less the calls still queued behind it in the scheduler, which the lessor
        alone would run after it."""
        ctx = unit.ctx
        if ctx is not None:
            behind = self.hub.queued(unit.topic, unit.partition)
            left = start_deadline(ctx) - time.time() - self.cost * behind
            self.inline_slack = min(self.inline_slack, left)
        started = time.perf_counter()
        outcome = self._call(value)
        took = time.perf_counter() - started
        self.cost += COST_WEIGHT * (took - self.cost)
        self.stats.lessor_calls += 1
        return outcome

    def _call(self, value: Any) -> Outcome:
        try:
            if self.kind == FILTER:
                return True, bool(self.fn(value))
            if self.kind == FLAT_MAP:
                return True, list(self.fn(value))
            return True, self.fn(value)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # the user's code: its failure is the record's outcome
            return False, exc

    def accept(self, call: Call) -> None:
        ctx = call.unit.ctx
        self._seq += 1
        heapq.heappush(self.queue, (start_deadline(ctx) if ctx is not None else 0.0, self._seq, call))
        self.held += 1

    def released(self) -> None:
        self.held -= 1
        self.releases += 1

    # -- on the hub's pump -----------------------------------------------------------------------

    @property
    def fn_bytes(self) -> bytes:
        if self._fn_bytes is None:
            self._fn_bytes = pickle.dumps(self.fn, pickle.HIGHEST_PROTOCOL)
        return self._fn_bytes

    def tick(self, now: float, wall: float) -> None:
        """Timeouts, then lease or release, then hand out batches, then release what is done."""
        if self.timeout is not None and self.batches:
            self._check_timeouts(now)
        self._lease_or_release(now, wall)
        if self.queue:
            self._dispatch()
        self.flush()

    def flush(self) -> None:
        """Release the lanes whose head is done (one at a time: a release that stops the pipeline
        leaves the others for the next pump)."""
        ready = self.lanes_ready
        while ready:
            self.release_lane(ready.pop())

    def _lease_or_release(self, now: float, wall: float) -> None:
        queue = self.queue
        lessees = self.lessees
        leasing = self.leasing
        head = slack(queue[0][0], wall, self.cost, len(queue), len(lessees)) if queue else self.inline_slack
        self.inline_slack = math.inf
        needs_one = bool(queue) and not self.lessor_may_run
        while leasing.should_lease(
            now, len(lessees), slack=head, needs_one=needs_one, free=self.hub.free(self.executor)
        ):
            if self.hub.lease(self, now) is None:
                break
            leasing.leased(now)
            needs_one = False
            head = 0.0  # one lease per tick beyond the floor: let it show its effect first
        if not queue and not self.batches:
            for lessee in lessees:
                if lessee.batch is None and leasing.should_release(now, len(lessees), lessee.idle_since):
                    self.hub.give_back(lessee, now)
                    leasing.released(now)
                    break

    def _dispatch(self) -> None:
        queue = self.queue
        idle = [lessee for lessee in self.lessees if lessee.ready and lessee.batch is None]
        if not idle:
            return
        for lessee in idle:
            if not queue:
                return
            if lessee.kind == "process":
                size = min(PROCESS_BATCH, max(1, math.ceil(len(queue) / len(idle))))
            else:
                size = 1  # a thread blocks in its call: a second call would wait behind it
            calls: list[Call] = []
            while queue and len(calls) < size:
                call = heapq.heappop(queue)[2]
                if not call.dropped:
                    calls.append(call)
            if not calls:
                continue
            token = self.hub.token()
            lessee.batch = token
            self.batches[token] = (lessee, calls)
            started = time.perf_counter()
            lessee.send(token, self.kind, self.fn, [call.value for call in calls])
            stats = self.stats
            stats.handoff_seconds += time.perf_counter() - started
            stats.handoff_calls += len(calls)

    def help(self, until: float) -> int:
        """Run queued calls on the lessor until ``until`` (perf seconds): it has nothing else to run."""
        if not self.lessor_may_run:
            return 0
        queue = self.queue
        ran = 0
        perf = time.perf_counter
        while queue and perf() < until:
            call = heapq.heappop(queue)[2]
            if call.dropped:
                continue
            started = perf()
            call.ok, call.result = self._call(call.value)
            self.cost += COST_WEIGHT * (perf() - started - self.cost)
            self._done(call)
            ran += 1
        self.stats.lessor_calls += ran
        self.flush()
        return ran

    def _done(self, call: Call) -> None:
        call.done = True
        lane = call.lane
        if lane and lane[0] is call:
            self.lanes_ready.append(lane)

    def on_result(
        self, lessee: Lessee, token: int, outcomes: list[Outcome], seconds: float, now: float
    ) -> None:
        entry = self.batches.pop(token, None)
        lessee.batch = None
        lessee.idle_since = now
        if entry is None:
            return
        calls = entry[1]
        if calls:
            self.cost += COST_WEIGHT * (seconds / len(calls) - self.cost)
        for call, (ok, result) in zip(calls, outcomes, strict=False):
            if call.dropped or call.done:
                continue
            call.ok, call.result = ok, result
            self._done(call)

    def on_death(self, lessee: Lessee, now: float) -> None:
        """A leased lessee died: its batch runs again, less the call that was running twice."""
        self.stats.deaths += 1
        self._drop_lessee(lessee)
        if lessee.batch is None:
            return
        entry = self.batches.pop(lessee.batch, None)
        lessee.batch = None
        if entry is None:
            return
        calls = entry[1]
        running = lessee.current()
        blamed = calls[running[0]] if running is not None and running[0] < len(calls) else None
        if blamed is not None:
            blamed.deaths += 1
            if blamed.deaths >= 2:
                blamed.ok, blamed.result = (
                    False,
                    LesseeDied(f"step {self.node_id!r}: two lessees died running this record's call"),
                )
                self._done(blamed)
        self._requeue(calls)

    def _check_timeouts(self, now: float) -> None:
        timeout = self.timeout
        assert timeout is not None
        for lessee in list(self.lessees):
            token = lessee.batch
            if token is None:
                continue
            running = lessee.current()
            if running is None or now - running[1] <= timeout:
                continue
            entry = self.batches.pop(token, None)
            lessee.batch = None
            self.stats.timeouts += 1
            if lessee.kind == "thread":
                self.stats.abandoned += 1
            self._drop_lessee(lessee)
            lessee.kill()
            self.hub.retire(lessee)
            if entry is None:
                continue
            calls = entry[1]
            if running[0] < len(calls):
                late = calls[running[0]]
                late.ok, late.result = (
                    False,
                    StepTimeout(
                        f"step {self.node_id!r}: the call ran past its timeout of {timeout:g}s "
                        f"({'abandoned thread' if lessee.kind == 'thread' else 'lessee process replaced'})"
                    ),
                )
                self._done(late)
            self._requeue(calls)

    def _requeue(self, calls: list[Call]) -> None:
        for call in calls:
            if not call.done and not call.dropped:
                ctx = call.unit.ctx
                self._seq += 1
                heapq.heappush(self.queue, (start_deadline(ctx) if ctx is not None else 0.0, self._seq, call))

    def _drop_lessee(self, lessee: Lessee) -> None:
        if lessee in self.lessees:
            self.lessees.remove(lessee)
            self.hub.ended(lessee, self)

    def drop(self, calls: list[Call]) -> None:
        """Forget calls (their partition went, their pipeline stopped): nothing is released for them."""
        for call in calls:
            if not call.dropped:
                call.dropped = True
                self.held -= 1

    def leased_seconds(self, now: float) -> float:
        return self.stats.closed_seconds + sum(now - lessee.leased_at for lessee in self.lessees)
