"""Runs: records of one operator-partition queued with one context object share one queue entry.

The claim to check is that runs change the cost of queueing and nothing else: the order records run
in is the order of queueing each with its own (equal) context, which the brute force below computes
from the definition (the ready head with the smallest ``(priority now, time it became head)``, then
up to ``max_records`` records of it, in queueing order).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from cadenza.scheduling import (
    CameoPolicy,
    EdfPolicy,
    FairPolicy,
    Measurement,
    Scheduler,
    SchedulingContext,
    SchedulingPolicy,
    VirtualClock,
)


def ctx(frontier: float, tenant: str = "t", latency: float = 0.0) -> SchedulingContext:
    return SchedulingContext("p", tenant, frontier, latency, 0.0, 0.0, 0, 1)


def run_all(sched: Scheduler[str, int]) -> list[tuple[str, int]]:
    out: list[tuple[str, int]] = []
    while (quantum := sched.next_batch()) is not None:
        out.extend((quantum.key, item) for _, item in quantum)
    return out


def test_records_sharing_a_context_form_one_run_and_keep_their_order() -> None:
    sched: Scheduler[str, int] = Scheduler(EdfPolicy(), clock=VirtualClock(), max_records=100)
    shared = ctx(5.0)
    for i in range(10):
        sched.enqueue("a", shared, i)
    assert (len(sched), sched.buffered("a"), sched.runs("a")) == (10, 10, 1)
    head = sched.head("a")
    assert head is not None and head[0] is shared and head[1] == 0
    assert run_all(sched) == [("a", i) for i in range(10)]
    assert sched.runs("a") == 0


def test_a_different_context_splits_the_run_even_when_equal() -> None:
    sched: Scheduler[str, int] = Scheduler(EdfPolicy(), clock=VirtualClock(), max_records=100)
    first, equal, other = ctx(5.0), ctx(5.0), ctx(1.0)
    sched.enqueue("a", first, 0)
    sched.enqueue("a", first, 1)
    sched.enqueue("a", equal, 2)
    sched.enqueue("a", other, 3)
    sched.enqueue("a", first, 4)  # not adjacent to its run any more: a new run
    assert sched.runs("a") == 4
    quantum = sched.next_batch()
    assert quantum is not None
    assert [(c, i) for c, i in quantum] == [(first, 0), (first, 1), (equal, 2), (other, 3), (first, 4)]


def test_the_head_run_stands_for_the_partition_and_a_quantum_crosses_runs() -> None:
    """A partition whose head run is late yields to a more urgent one; within a quantum, runs follow."""
    sched: Scheduler[str, int] = Scheduler(EdfPolicy(), clock=VirtualClock(), max_records=3, max_seconds=None)
    late, urgent_tail = ctx(9.0), ctx(0.5)
    for i in range(2):
        sched.enqueue("a", late, i)
    sched.enqueue("a", urgent_tail, 2)  # urgent, but behind a's head run: offset order first
    sched.enqueue("b", ctx(3.0), 10)
    sched.enqueue("b", ctx(4.0), 11)
    sched.enqueue("b", ctx(20.0), 12)
    sched.enqueue("b", ctx(20.0), 13)
    # b's head (3.0) beats a's head (9.0); a quantum of b takes 3 records whatever their deadlines.
    assert run_all(sched) == [("b", 10), ("b", 11), ("b", 12), ("a", 0), ("a", 1), ("a", 2), ("b", 13)]


def test_a_window_release_record_splits_its_run_and_is_due_when_it_is_head() -> None:
    clock = VirtualClock()
    sched: Scheduler[str, int] = Scheduler(EdfPolicy(), clock=clock, max_records=1, max_seconds=None)
    own_window = ctx(60.0)
    for i in range(3):
        sched.enqueue("a", own_window, i)
    sched.enqueue("a", ctx(10.0), 3)  # releases an earlier window: due sooner
    sched.enqueue("a", own_window, 4)
    sched.enqueue("b", ctx(30.0), 100)
    assert sched.runs("a") == 3
    order = run_all(sched)
    # a's head (60) is behind b (30); once a's first run is gone, its release record (10) is head.
    assert order == [("b", 100), ("a", 0), ("a", 1), ("a", 2), ("a", 3), ("a", 4)]


def test_cross_tenant_priority_under_fair_with_runs() -> None:
    """A run of a flooding tenant does not hold a waiting tenant's record back beyond one quantum."""
    policy = FairPolicy()
    clock = VirtualClock()
    sched: Scheduler[str, int] = Scheduler(policy, clock=clock, max_records=4, max_seconds=None)
    bulk = ctx(0.0, tenant="bulk")
    for i in range(12):
        sched.enqueue("bulk", bulk, i)
    order: list[tuple[str, int]] = []
    quantum = sched.next_batch()
    assert quantum is not None and quantum.key == "bulk"
    order.extend((quantum.key, item) for _, item in quantum)
    policy.process_ctx_from_reply(policy.prepare_reply(bulk, Measurement("p", "o", 0.004, 0.0, 0.0, 4)))
    sched.enqueue("urgent", ctx(0.0, tenant="urgent"), 100)
    quantum = sched.next_batch()
    assert quantum is not None and quantum.key == "urgent"
    order.extend((quantum.key, item) for _, item in quantum)
    assert order == [("bulk", 0), ("bulk", 1), ("bulk", 2), ("bulk", 3), ("urgent", 100)]
    assert sched.runs("bulk") == 1 and sched.buffered("bulk") == 8


def test_discard_drops_runs_too() -> None:
    sched: Scheduler[str, int] = Scheduler(EdfPolicy(), clock=VirtualClock())
    shared = ctx(1.0)
    for i in range(5):
        sched.enqueue("a", shared, i)
    assert sched.discard("a") == 5
    assert (len(sched), sched.runs("a"), sched.next_batch()) == (0, 0, None)


# --- brute force -------------------------------------------------------------------------------


def _reply(policy: SchedulingPolicy, taken_ctx: SchedulingContext, item: int, clock: VirtualClock) -> None:
    """Feed the policy what running a record cost (varied per record, so tenants' service differs)."""
    run_time = 0.001 * (1 + item % 3)
    policy.process_ctx_from_reply(
        policy.prepare_reply(taken_ctx, Measurement("p", "o", run_time, 0.0, clock.now(), 1))
    )


@dataclass
class _RefPartition:
    records: list[tuple[SchedulingContext, int]] = field(default_factory=list)
    since: int = -1  # when its current head entered contention; -1: not in contention


def reference_order(
    policy: SchedulingPolicy, ops: list[tuple[str, ...]], max_records: int, clock: VirtualClock, cost: float
) -> list[tuple[str, int]]:
    """The definition, with one context per record and a scan of every partition at each pick."""
    parts: dict[str, _RefPartition] = {}
    contexts: dict[str, SchedulingContext] = {}
    counter = 0
    order: list[tuple[str, int]] = []
    item = 0
    for op in ops:
        if op[0] == "enqueue":
            _, key, share, frontier = op
            part = parts.setdefault(key, _RefPartition())
            last = contexts.get(key)
            new = (
                ctx(last.frontier_time, last.tenant_id, last.latency_target)
                if share == "share" and last is not None
                else ctx(float(frontier), tenant=key[0], latency=1.0)
            )
            contexts[key] = new
            part.records.append((new, item))
            item += 1
            if part.since < 0:
                part.since, counter = counter, counter + 1
            continue
        now = clock.now()
        ready = [
            (policy.priority(p.records[0][0], now), p.since, k) for k, p in parts.items() if p.since >= 0
        ]
        if not ready:
            continue
        _, _, key = min(ready)
        part = parts[key]
        part.since = -1
        for _ in range(min(max_records, len(part.records))):
            taken_ctx, taken = part.records.pop(0)
            order.append((key, taken))
            clock.advance(cost)
            _reply(policy, taken_ctx, taken, clock)
        if part.records:
            part.since, counter = counter, counter + 1
    return order


def scheduler_order(
    policy: SchedulingPolicy, ops: list[tuple[str, ...]], max_records: int, clock: VirtualClock, cost: float
) -> tuple[list[tuple[str, int]], int]:
    sched: Scheduler[str, int] = Scheduler(policy, clock=clock, max_records=max_records, max_seconds=None)
    contexts: dict[str, SchedulingContext] = {}
    order: list[tuple[str, int]] = []
    item = 0
    most_runs = 0
    for op in ops:
        if op[0] == "enqueue":
            _, key, share, frontier = op
            last = contexts.get(key)
            shared = last if share == "share" and last is not None else None
            c = shared if shared is not None else ctx(float(frontier), tenant=key[0], latency=1.0)
            contexts[key] = c
            sched.enqueue(key, c, item)
            item += 1
            most_runs = max(most_runs, sched.runs(key))
            continue
        quantum = sched.next_batch()
        if quantum is None:
            continue
        for taken_ctx, taken in quantum:
            order.append((quantum.key, taken))
            clock.advance(cost)
            _reply(policy, taken_ctx, taken, clock)
    return order, most_runs


_ops = st.lists(
    st.one_of(
        st.tuples(
            st.just("enqueue"),
            st.sampled_from(["a0", "a1", "b0", "c0"]),  # first letter: the tenant
            st.sampled_from(["share", "new"]),
            st.integers(0, 20).map(str),
        ),
        st.tuples(st.just("pick")),
    ),
    max_size=80,
)


@settings(max_examples=200, deadline=None)
@given(ops=_ops, max_records=st.integers(1, 5), cost=st.sampled_from([0.0, 0.5, 3.0]))
def test_runs_order_equals_the_per_record_definition(
    ops: list[tuple[str, ...]], max_records: int, cost: float
) -> None:
    ops = [*ops, *[("pick",)] * 100]  # then run everything
    for make in (EdfPolicy, CameoPolicy, FairPolicy):
        expected = reference_order(make(), ops, max_records, VirtualClock(), cost)
        got, _ = scheduler_order(make(), ops, max_records, VirtualClock(), cost)
        assert got == expected
    enqueued = sum(1 for op in ops if op[0] == "enqueue")
    assert sorted(item for _, item in got) == list(range(enqueued))  # nothing lost or duplicated


class _CountingCameo(CameoPolicy):
    def __init__(self) -> None:
        super().__init__()
        self.priorities = 0
        self.parts = 0
        plain = self.priority

        def counted(ctx: SchedulingContext, now: float) -> float:
            self.priorities += 1
            return plain(ctx, now)

        self.priority = counted  # type: ignore[method-assign]  # what the scheduler would call

    def deadline_parts(self, ctx: SchedulingContext) -> tuple[float, float, float]:
        self.parts += 1
        return super().deadline_parts(ctx)


def test_cameo_under_overload_orders_tardy_heads_by_target_without_re_evaluating_every_head() -> None:
    """Every head tardy: each pick must not look at all of them (it used to re-key every head)."""
    partitions = 500
    policy = _CountingCameo()
    clock = VirtualClock()
    sched: Scheduler[str, int] = Scheduler(policy, clock=clock, max_records=1, max_seconds=None)
    for p in range(partitions):
        for _ in range(2):
            sched.enqueue(f"x{p}", ctx(0.0, tenant="x", latency=1.0 + (p % 7) * 0.25), p)
    clock.set(100.0)  # far past every start deadline
    order: list[int] = []
    for _ in range(2 * partitions):
        quantum = sched.next_batch()
        assert quantum is not None
        order.extend(item for _, item in quantum)
        clock.advance(0.01)
    assert sched.next_batch() is None
    assert policy.priorities == 0
    assert policy.parts == 2 * partitions  # once per head: each record becomes head once
    # Tighter targets first (all are late by the same "now"), then the head that waited longest.
    targets = [1.0 + (p % 7) * 0.25 for p in order]
    assert targets == sorted(targets)
    assert order[:3] == [0, 7, 14]  # equal targets: the head that entered contention first
    assert sorted(order) == sorted(list(range(partitions)) * 2)


def test_a_cameo_subclass_with_its_own_priority_is_asked_for_it() -> None:
    class Reversed(CameoPolicy):
        def priority(self, ctx: SchedulingContext, now: float) -> float:
            return -super().priority(ctx, now)

    assert CameoPolicy().postpones_tardy and not Reversed().postpones_tardy
    assert not CameoPolicy(postpone_tardy=False).postpones_tardy
    sched: Scheduler[str, int] = Scheduler(Reversed(), clock=VirtualClock(), max_records=1, max_seconds=None)
    sched.enqueue("soon", ctx(1.0, latency=1.0), 1)
    sched.enqueue("late", ctx(50.0, latency=1.0), 2)
    assert run_all(sched) == [("late", 2), ("soon", 1)]


# --- enqueue_run: a fetched batch queued per partition at its end ------------------------------

_batches = st.lists(
    st.lists(
        st.tuples(st.sampled_from(["a0", "a1", "b0", "c0"]), st.booleans(), st.integers(0, 20)),
        max_size=30,
    ),
    min_size=1,
    max_size=5,
)


def _contexts_of(
    batch: list[tuple[str, bool, int]], last: dict[str, SchedulingContext]
) -> list[tuple[str, SchedulingContext]]:
    """Each record's key and context; ``True`` reuses the key's previous context object."""
    out: list[tuple[str, SchedulingContext]] = []
    for key, share, frontier in batch:
        previous = last.get(key)
        c = previous if share and previous is not None else ctx(float(frontier), tenant=key[0], latency=1.0)
        last[key] = c
        out.append((key, c))
    return out


def _order(
    policy: SchedulingPolicy, batches: list[list[tuple[str, bool, int]]], grouped: bool
) -> list[tuple[str, int]]:
    clock = VirtualClock()
    sched: Scheduler[str, int] = Scheduler(policy, clock=clock, max_records=3, max_seconds=None)
    last: dict[str, SchedulingContext] = {}
    order: list[tuple[str, int]] = []
    item = 0
    for batch in batches:
        records = _contexts_of(batch, last)
        if grouped:  # as the worker's admit: per key in order of first appearance, runs in order
            segments: dict[str, list[tuple[SchedulingContext, list[int]]]] = {}
            for key, c in records:
                mine = segments.setdefault(key, [])
                if mine and mine[-1][0] is c:
                    mine[-1][1].append(item)
                else:
                    mine.append((c, [item]))
                item += 1
            for key, mine in segments.items():
                for c, items in mine:
                    sched.enqueue_run(key, c, items)
        else:
            for key, c in records:
                sched.enqueue(key, c, item)
                item += 1
        for _ in range(3):  # run some of it before the next batch lands
            quantum = sched.next_batch()
            if quantum is None:
                break
            for taken_ctx, taken in quantum:
                order.append((quantum.key, taken))
                clock.advance(0.5)
                _reply(policy, taken_ctx, taken, clock)
    while (quantum := sched.next_batch()) is not None:
        for taken_ctx, taken in quantum:
            order.append((quantum.key, taken))
            clock.advance(0.5)
            _reply(policy, taken_ctx, taken, clock)
    return order


@settings(max_examples=200, deadline=None)
@given(batches=_batches)
def test_enqueue_run_per_key_at_the_end_of_a_batch_equals_enqueueing_each_record(
    batches: list[list[tuple[str, bool, int]]],
) -> None:
    for make in (EdfPolicy, CameoPolicy, FairPolicy):
        expected = _order(make(), batches, grouped=False)
        assert _order(make(), batches, grouped=True) == expected
    assert sorted(item for _, item in expected) == list(range(sum(len(b) for b in batches)))


def test_enqueue_run_of_nothing_queues_nothing() -> None:
    sched: Scheduler[str, int] = Scheduler(EdfPolicy(), clock=VirtualClock())
    sched.enqueue_run("a", ctx(1.0), [])
    assert (len(sched), sched.runs("a"), sched.next_batch()) == (0, 0, None)
