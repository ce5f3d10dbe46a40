"""Cameo's two-level, policy-agnostic scheduler.

Level 1 orders operator-partitions by the priority of their head record; level 2 keeps the records of
one operator-partition in arrival (offset) order, always. Reordering only across operator-partitions
is what lets deadlines reorder work without breaking keyed state, watermarks or per-partition commits.

Records that share one context object (the worker gives the records of a partition that arrived
together one context, see :mod:`cadenza.worker.engine.context_stamps`) are stored as one run: one
``[context, count]`` entry beside the records, so queueing a record costs an identity test and an
increment instead of a new entry. A run has one priority by construction (a priority is a function of
the context), so the order is exactly the order of queueing each record with its own equal context;
runs are never merged across different context objects, however equal.

Execution is non-preemptive: the executor takes a :class:`Quantum` (up to ``max_records`` records,
or as many as fit in ``max_seconds`` of clock time, at least one) from the chosen operator-partition,
runs it, and asks again; priorities are re-checked between quanta.

Level 1 is a binary heap of ``(priority, seq, partition)`` entries with lazy invalidation. An entry is
pushed when a partition's head changes (a record lands in an empty queue, or a quantum ends with
records left); each partition has at most one live entry, identified by ``seq``, and anything else
popped is skipped. Equal priorities go to the partition that entered contention first (smaller
``seq``).
How priorities are evaluated depends on what the policy declares:

- static (the default; fifo, edf, sjf): the priority of a head is computed once, when it becomes
  head. Enqueue and pick are O(log n).
- ``time_dependent`` and ``monotone_priority`` (fair; user policies):
  priorities change while records wait, but only upwards, so a heap key is a lower bound of the
  true priority. At a pick the top entry is re-evaluated; if its key was stale it is re-keyed in
  place and the next top is examined, otherwise it is the true minimum. O(log n) per re-keyed entry.
- ``postpones_tardy`` (cameo): a head's priority is its start deadline ``d`` while ``now <= e``, and
  ``now + p`` after (``policy.deadline_parts(ctx) == (d, e, p)``, ``d <= e``, ``p >= 0``). Under
  overload every waiting head turns tardy and its priority moves with the clock, so lazy re-keying
  would re-key every head at every pick (linear in the partitions). Instead on-time heads sit in a
  heap by ``d`` and tardy ones in a second heap by ``p``, whose order does not change with ``now``;
  a pick moves the heads that turned tardy from the top of the first heap to the second (each head
  moves at most once) and compares the two tops. A head that turned tardy below the top may wait
  there: its key ``d`` is below its true priority (``now + p > e >= d``), so it cannot be picked
  early, and it moves when it surfaces. O(log n) amortized per pick.
- ``time_dependent`` only: no order can be kept, so every ready head is evaluated at each pick:
  O(ready partitions) per quantum, correct by construction.

The scheduler keeps no policy state and is single-threaded: the executor thread owns it.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Hashable, Iterator
from heapq import heappop, heappush, heapreplace
from types import TracebackType
from typing import Generic, TypeVar

from cadenza.errors import ConfigError
from cadenza.scheduling.clock import Clock, SystemClock
from cadenza.scheduling.context import SchedulingContext, start_deadline
from cadenza.scheduling.policy import Priority, SchedulingPolicy

__all__ = ["Quantum", "Scheduler", "drain"]

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")

_NOT_READY = -1  # ``seq`` of a partition that is empty or being run
# How head priorities are evaluated (see the module docstring).
_STATIC, _MONOTONE, _SCAN, _TARDY = 0, 1, 2, 3


class _Run:
    """Consecutive queued records of one operator-partition that share one context object."""

    __slots__ = ("ctx", "left")

    def __init__(self, ctx: SchedulingContext) -> None:
        self.ctx = ctx
        self.left = 1


class _OpPartition(Generic[K, T]):
    __slots__ = ("key", "queue", "runs", "seq")

    def __init__(self, key: K) -> None:
        self.key = key
        #: The records, in queueing order.
        self.queue: deque[T] = deque()
        #: The runs of those records, oldest first; their ``left`` counts add up to ``len(queue)``.
        self.runs: deque[_Run] = deque()
        # Sequence number of the partition's live heap entry (also its tie-breaker when heads are
        # scanned), or _NOT_READY.
        self.seq = _NOT_READY


class Quantum(Generic[K, T]):
    """The records one pick grants to one operator-partition, handed out one at a time.

    Records are taken from the queue only as they are iterated, so a quantum cut short by its time
    budget (or abandoned by the executor) leaves the rest queued in order. Exhausting the iterator,
    calling :meth:`close`, leaving a ``with`` block, or asking the scheduler for the next batch ends
    it and puts the partition back in contention with its new head.
    """

    __slots__ = ("_open", "_part", "_sched", "_start", "_taken")

    def __init__(self, scheduler: Scheduler[K, T], part: _OpPartition[K, T], start: float) -> None:
        self._sched = scheduler
        self._part = part
        self._start = start
        self._taken = 0
        self._open = True

    @property
    def key(self) -> K:
        """The operator-partition this quantum runs."""
        return self._part.key

    @property
    def taken(self) -> int:
        """Records handed out so far."""
        return self._taken

    @property
    def is_open(self) -> bool:
        return self._open

    def __iter__(self) -> Iterator[tuple[SchedulingContext, T]]:
        """The records, as :meth:`__next__` hands them out, from a generator: resuming it costs less
        than a method call per record, which is what the executor's loop pays."""
        sched = self._sched
        part = self._part
        queue = part.queue
        runs = part.runs
        limit = sched._max_records
        budget = sched._max_seconds
        now = sched._now
        start = self._start
        while self._open:
            taken = self._taken
            if not queue or taken >= limit or (taken and budget is not None and now() - start >= budget):
                break
            self._taken = taken + 1
            sched._size -= 1
            run = runs[0]
            left = run.left
            if left == 1:
                runs.popleft()
            else:
                run.left = left - 1
            yield run.ctx, queue.popleft()
        self.close()

    def __next__(self) -> tuple[SchedulingContext, T]:
        if self._open:
            sched = self._sched
            queue = self._part.queue
            taken = self._taken
            if (
                queue
                and taken < sched._max_records
                and (
                    taken == 0
                    or sched._max_seconds is None
                    or sched._now() - self._start < sched._max_seconds
                )
            ):
                self._taken = taken + 1
                sched._size -= 1
                run = self._part.runs[0]
                left = run.left
                if left == 1:
                    self._part.runs.popleft()
                else:
                    run.left = left - 1
                return run.ctx, queue.popleft()
            self.close()
        raise StopIteration

    def close(self) -> None:
        """End the quantum; idempotent."""
        if self._open:
            self._open = False
            self._sched._finish(self)

    def __enter__(self) -> Quantum[K, T]:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Quantum(key={self._part.key!r}, taken={self._taken}, open={self._open})"


class Scheduler(Generic[K, T]):
    """Operator-partition queues ordered by a policy's priority of their heads.

    ``K`` is the operator-partition key (any hashable, e.g. ``(operator_id, partition)``), ``T`` the
    executor's payload stored next to each record's context. ``max_records`` and ``max_seconds``
    bound a quantum; either may be ``None`` but not both, since a quantum must end.
    """

    __slots__ = (
        "_active",
        "_clock",
        "_deadline_parts",
        "_heap",
        "_max_records",
        "_max_seconds",
        "_mode",
        "_now",
        "_on_time",
        "_parts",
        "_policy",
        "_priority",
        "_seq",
        "_size",
        "_tardy",
    )

    def __init__(
        self,
        policy: SchedulingPolicy,
        *,
        clock: Clock | None = None,
        max_records: int | None = 16,
        max_seconds: float | None = 0.001,
    ) -> None:
        if max_records is None and max_seconds is None:
            raise ConfigError("scheduler quantum needs max_records, max_seconds or both")
        if max_records is not None and (
            isinstance(max_records, bool) or not isinstance(max_records, int) or max_records < 1
        ):
            raise ConfigError(
                f"scheduler quantum max_records must be a positive integer, got {max_records!r}"
            )
        if max_seconds is not None and not (0.0 < max_seconds < math.inf):
            raise ConfigError(
                f"scheduler quantum max_seconds must be positive and finite, got {max_seconds!r}"
            )
        self._policy = policy
        self._priority = policy.priority
        self._deadline_parts: Callable[[SchedulingContext], tuple[float, float, float]] | None = None
        if policy.postpones_tardy:
            self._mode = _TARDY
            self._deadline_parts = policy.deadline_parts
        elif not policy.time_dependent:
            self._mode = _STATIC
        elif policy.monotone_priority:
            self._mode = _MONOTONE
        else:
            self._mode = _SCAN
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._now = self._clock.now
        self._max_records: int = max_records if max_records is not None else (1 << 62)
        self._max_seconds = max_seconds
        self._parts: dict[K, _OpPartition[K, T]] = {}
        self._heap: list[tuple[Priority, int, _OpPartition[K, T]]] = []
        #: ``_TARDY`` mode: on-time heads as ``(d, seq, part, e, p)``, tardy ones as ``(p, seq, part)``.
        self._on_time: list[tuple[float, int, _OpPartition[K, T], float, float]] = []
        self._tardy: list[tuple[float, int, _OpPartition[K, T]]] = []
        self._seq = 0
        self._size = 0
        self._active: Quantum[K, T] | None = None

    @property
    def policy(self) -> SchedulingPolicy:
        return self._policy

    @property
    def clock(self) -> Clock:
        return self._clock

    @property
    def active_key(self) -> K | None:
        """The operator-partition of the open quantum, if any."""
        return None if self._active is None else self._active.key

    def __len__(self) -> int:
        """Records buffered in all queues (what backpressure looks at)."""
        return self._size

    def buffered(self, key: K) -> int:
        part = self._parts.get(key)
        return 0 if part is None else len(part.queue)

    def keys(self) -> list[K]:
        """Operator-partitions that have records queued."""
        return [key for key, part in self._parts.items() if part.queue]

    def ready(self) -> int:
        """Operator-partitions in contention for the next pick (queued records, not being run)."""
        return sum(1 for part in self._parts.values() if part.seq != _NOT_READY)

    def head(self, key: K) -> tuple[SchedulingContext, T] | None:
        part = self._parts.get(key)
        if part is None or not part.queue:
            return None
        return part.runs[0].ctx, part.queue[0]

    def earliest_start_deadline(self) -> float | None:
        """The earliest start deadline (``t_F + L - C``) among the queued heads, or ``None`` if nothing
        is queued: how long other work (a warm copy's reading) may take before a queued record risks
        its target, whatever the policy orders by. A scan of the operator-partitions: not for the
        per-record path."""
        earliest: float | None = None
        for part in self._parts.values():
            if part.runs:
                deadline = start_deadline(part.runs[0].ctx)
                if earliest is None or deadline < earliest:
                    earliest = deadline
        return earliest

    def runs(self, key: K) -> int:
        """Queue entries (runs of records sharing one context) of an operator-partition."""
        part = self._parts.get(key)
        return 0 if part is None else len(part.runs)

    def enqueue(self, key: K, ctx: SchedulingContext, item: T) -> None:
        """Append a record to its operator-partition; callers enqueue in offset order.

        A record queued with the very context object of the record queued before it in the same
        operator-partition joins that record's run (see the module docstring).
        """
        part = self._parts.get(key)
        if part is None:
            part = self._parts[key] = _OpPartition(key)
        queue = part.queue
        queue.append(item)
        self._size += 1
        runs = part.runs
        if runs:
            tail = runs[-1]
            if tail.ctx is ctx:
                tail.left += 1
                return
            runs.append(_Run(ctx))
        else:
            runs.append(_Run(ctx))
            if self._active is None or self._active._part is not part:
                self._push(part)

    def enqueue_run(self, key: K, ctx: SchedulingContext, items: list[T]) -> None:
        """Append records that share the context object ``ctx`` to their operator-partition, in order.

        The same as :meth:`enqueue` of each with ``ctx``, one after the other, for one call per run
        instead of one per record: the worker admits a fetched batch and queues each partition's
        records once the batch is decoded.
        """
        count = len(items)
        if not count:
            return
        part = self._parts.get(key)
        if part is None:
            part = self._parts[key] = _OpPartition(key)
        part.queue.extend(items)
        self._size += count
        runs = part.runs
        if runs:
            tail = runs[-1]
            if tail.ctx is ctx:
                tail.left += count
                return
        run = _Run(ctx)
        run.left = count
        runs.append(run)
        if len(runs) == 1 and (self._active is None or self._active._part is not part):
            self._push(part)

    def next_batch(self) -> Quantum[K, T] | None:
        """Close the open quantum, if any, and open one on the best operator-partition (``None`` if idle)."""
        if self._active is not None:
            self._active.close()
        if self._mode == _STATIC:
            heap = self._heap
            part = None
            while heap:
                _, seq, candidate = heappop(heap)
                if seq == candidate.seq:
                    part = candidate
                    break
        elif self._mode == _TARDY:
            part = self._pick_on_time_or_tardy()
        elif self._mode == _MONOTONE:
            part = self._pick_by_rekeying()
        else:
            part = self._pick_by_scan()
        if part is None:
            return None
        part.seq = _NOT_READY
        quantum = Quantum(self, part, self._now() if self._max_seconds is not None else 0.0)
        self._active = quantum
        return quantum

    def discard(self, key: K) -> int:
        """Drop an operator-partition and its queued records (its partition was revoked); returns how many.

        Safe while the partition is being run: its quantum simply yields nothing more.
        """
        part = self._parts.pop(key, None)
        if part is None:
            return 0
        dropped = len(part.queue)
        part.queue.clear()
        part.runs.clear()
        part.seq = _NOT_READY  # its heap entry, if any, is now stale
        self._size -= dropped
        return dropped

    def _push(self, part: _OpPartition[K, T]) -> None:
        seq = self._seq
        self._seq = seq + 1
        part.seq = seq
        mode = self._mode
        if mode == _TARDY:
            deadline, late_after, postponement = self._deadline_parts(part.runs[0].ctx)  # type: ignore[misc]
            if self._now() <= late_after:
                heappush(self._on_time, (deadline, seq, part, late_after, postponement))
            else:
                heappush(self._tardy, (postponement, seq, part))
        elif mode != _SCAN:
            heappush(self._heap, (self._priority(part.runs[0].ctx, self._now()), seq, part))

    def _pick_by_rekeying(self) -> _OpPartition[K, T] | None:
        now = self._now()
        priority = self._priority
        heap = self._heap
        while heap:
            stale_key, seq, part = heap[0]
            if seq != part.seq:
                heappop(heap)
                continue
            current = priority(part.runs[0].ctx, now)
            # Stale: every other key is a lower bound of its own priority, so look at the top again.
            if current > stale_key:  # type: ignore[operator]  # one policy's priorities are comparable
                heapreplace(heap, (current, seq, part))
                continue
            heappop(heap)
            return part
        return None

    def _pick_on_time_or_tardy(self) -> _OpPartition[K, T] | None:
        now = self._now()
        heap = self._on_time
        tardy = self._tardy
        while heap:
            _, seq, part, late_after, postponement = heap[0]
            if seq != part.seq:
                heappop(heap)
            elif now > late_after:  # turned tardy while it waited: ordered by its postponement now
                heappop(heap)
                heappush(tardy, (postponement, seq, part))
            else:
                break
        while tardy and tardy[0][1] != tardy[0][2].seq:
            heappop(tardy)
        if not tardy:
            return heappop(heap)[2] if heap else None
        if not heap:
            return heappop(tardy)[2]
        late, late_seq, _ = tardy[0]
        on_time, on_time_seq, _, _, _ = heap[0]
        # The priority order of the two tops, ties to the head that entered contention first.
        if (now + late, late_seq) < (on_time, on_time_seq):
            return heappop(tardy)[2]
        return heappop(heap)[2]

    def _pick_by_scan(self) -> _OpPartition[K, T] | None:
        now = self._now()
        priority = self._priority
        best: _OpPartition[K, T] | None = None
        best_key: tuple[Priority, int] | None = None
        for part in self._parts.values():
            seq = part.seq
            if seq == _NOT_READY:
                continue
            sort_key = (priority(part.runs[0].ctx, now), seq)
            if best_key is None or sort_key < best_key:
                best, best_key = part, sort_key
        return best

    def _finish(self, quantum: Quantum[K, T]) -> None:
        if self._active is quantum:
            self._active = None
        part = quantum._part
        if part.queue and self._parts.get(part.key) is part:
            self._push(part)

    def __repr__(self) -> str:
        return (
            f"Scheduler(policy={self._policy!r}, buffered={self._size}, partitions={len(self._parts)}, "
            f"active={self.active_key!r})"
        )


def drain(
    scheduler: Scheduler[K, T],
    run: Callable[[K, SchedulingContext, T], object],
    *,
    max_batches: int | None = None,
) -> int:
    """Run quanta until the scheduler is idle (or ``max_batches`` were run); return records run.

    A minimal stand-in for the executor, for tests and tools; ``run`` may enqueue more records.
    """
    records = 0
    batches = 0
    while max_batches is None or batches < max_batches:
        quantum = scheduler.next_batch()
        if quantum is None:
            break
        batches += 1
        key = quantum.key
        for ctx, item in quantum:
            run(key, ctx, item)
            records += 1
    return records
