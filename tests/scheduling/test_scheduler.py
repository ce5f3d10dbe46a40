"""The two-level scheduler: quanta, FIFO within an operator-partition, priority across them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cadenza.errors import ConfigError
from cadenza.scheduling import (
    BasePolicy,
    EdfPolicy,
    Measurement,
    Quantum,
    Scheduler,
    SchedulingContext,
    SchedulingPolicy,
    VirtualClock,
    drain,
    get_policy,
)

T = TypeVar("T")
USER_POLICY = "tests.scheduling.test_policy_loader:MyPolicy"
ALL_POLICIES = ["fifo", "edf", "cameo", "sjf", "fair", USER_POLICY]


def ctx(deadline: float, tenant: str = "t", pipeline: str = "p") -> SchedulingContext:
    """A context whose EDF priority is ``deadline``."""
    return SchedulingContext(pipeline, tenant, deadline, 0.0, 0.0, 0.0, 0, 1)


def take(
    quantum_source: Scheduler[str, int], clock: VirtualClock | None = None, cost: float = 0.0
) -> list[tuple[str, int]]:
    quantum = quantum_source.next_batch()
    assert quantum is not None
    out = []
    for _, item in quantum:
        out.append((quantum.key, item))
        if clock is not None:
            clock.advance(cost)
    return out


def test_empty_scheduler() -> None:
    sched: Scheduler[str, int] = Scheduler(EdfPolicy(), clock=VirtualClock())
    assert sched.next_batch() is None
    assert len(sched) == 0
    assert sched.keys() == []
    assert sched.active_key is None


def test_quantum_by_records_and_priorities_rechecked_between_quanta() -> None:
    sched: Scheduler[str, int] = Scheduler(EdfPolicy(), clock=VirtualClock(), max_records=3, max_seconds=None)
    for i in range(5):
        sched.enqueue("a", ctx(1.0), i)
    sched.enqueue("b", ctx(2.0), 100)
    assert len(sched) == 6
    assert sched.buffered("a") == 5
    assert take(sched) == [("a", 0), ("a", 1), ("a", 2)]
    assert len(sched) == 3
    # While "a" still has the best head, a more urgent record arrives at "c": it goes next.
    sched.enqueue("c", ctx(0.5), 200)
    assert take(sched) == [("c", 200)]
    assert take(sched) == [("a", 3), ("a", 4)]
    assert take(sched) == [("b", 100)]
    assert sched.next_batch() is None
    assert len(sched) == 0


def test_quantum_by_time_uses_the_injected_clock() -> None:
    clock = VirtualClock(10.0)
    sched: Scheduler[str, int] = Scheduler(EdfPolicy(), clock=clock, max_records=None, max_seconds=0.75)
    for i in range(7):
        sched.enqueue("a", ctx(1.0), i)
    # Each record takes 0.25 s: the fourth would start 0.75 s into the quantum, which is its budget.
    assert take(sched, clock, 0.25) == [("a", 0), ("a", 1), ("a", 2)]
    assert take(sched, clock, 0.25) == [("a", 3), ("a", 4), ("a", 5)]
    assert take(sched, clock, 0.25) == [("a", 6)]


def test_a_quantum_runs_at_least_one_record_even_if_it_overruns() -> None:
    clock = VirtualClock()
    sched: Scheduler[str, int] = Scheduler(EdfPolicy(), clock=clock, max_records=8, max_seconds=0.5)
    for i in range(3):
        sched.enqueue("a", ctx(1.0), i)
    assert take(sched, clock, 2.0) == [("a", 0)]


def test_both_limits_whichever_comes_first() -> None:
    clock = VirtualClock()
    sched: Scheduler[str, int] = Scheduler(EdfPolicy(), clock=clock, max_records=2, max_seconds=1.0)
    for i in range(4):
        sched.enqueue("a", ctx(1.0), i)
    assert take(sched, clock, 0.125) == [("a", 0), ("a", 1)]  # records first
    assert take(sched, clock, 1.0) == [("a", 2)]  # time first


def test_an_abandoned_quantum_leaves_the_rest_queued_in_order() -> None:
    sched: Scheduler[str, int] = Scheduler(EdfPolicy(), clock=VirtualClock(), max_records=10)
    for i in range(4):
        sched.enqueue("a", ctx(1.0), i)
    sched.enqueue("b", ctx(3.0), 100)
    quantum = sched.next_batch()
    assert quantum is not None
    assert next(quantum)[1] == 0
    assert sched.active_key == "a"
    assert sched.ready() == 1  # "b" only; "a" is being run
    # The executor gives up (e.g. its operator raised); asking again closes the quantum.
    assert take(sched) == [("a", 1), ("a", 2), ("a", 3)]
    assert take(sched) == [("b", 100)]


def test_records_enqueued_to_the_running_partition_keep_their_order() -> None:
    sched: Scheduler[str, int] = Scheduler(EdfPolicy(), clock=VirtualClock(), max_records=3)
    sched.enqueue("a", ctx(5.0), 0)
    sched.enqueue("b", ctx(1.0), 100)
    with sched.next_batch() as quantum:  # type: ignore[union-attr]
        assert quantum.key == "b"
        assert next(quantum) == (ctx(1.0), 100)
        sched.enqueue("b", ctx(9.0), 101)  # lands behind; the running partition is not re-pushed
        assert next(quantum)[1] == 101
        assert quantum.taken == 2
    assert not quantum.is_open
    assert take(sched) == [("a", 0)]
    assert sched.next_batch() is None


def test_a_partition_emptied_mid_quantum_comes_back_when_refilled() -> None:
    sched: Scheduler[str, int] = Scheduler(EdfPolicy(), clock=VirtualClock(), max_records=3)
    sched.enqueue("a", ctx(1.0), 0)
    quantum = sched.next_batch()
    assert quantum is not None
    assert list(quantum) == [(ctx(1.0), 0)]
    sched.enqueue("a", ctx(1.0), 1)
    assert take(sched) == [("a", 1)]


def test_discard_drops_a_partition_and_its_stale_entry() -> None:
    sched: Scheduler[str, int] = Scheduler(EdfPolicy(), clock=VirtualClock(), max_records=1)
    for i in range(3):
        sched.enqueue("a", ctx(1.0), i)
    sched.enqueue("b", ctx(2.0), 100)
    assert sched.discard("a") == 3
    assert sched.discard("missing") == 0
    assert len(sched) == 1
    assert take(sched) == [("b", 100)]
    sched.enqueue("a", ctx(1.0), 7)  # a revoked partition that comes back starts empty
    assert take(sched) == [("a", 7)]
    assert sched.next_batch() is None


def test_discard_of_the_running_partition() -> None:
    sched: Scheduler[str, int] = Scheduler(EdfPolicy(), clock=VirtualClock(), max_records=5)
    for i in range(3):
        sched.enqueue("a", ctx(1.0), i)
    quantum = sched.next_batch()
    assert quantum is not None
    next(quantum)
    assert sched.discard("a") == 2
    assert list(quantum) == []
    assert len(sched) == 0
    assert sched.next_batch() is None


def test_introspection() -> None:
    sched: Scheduler[str, int] = Scheduler(EdfPolicy(), clock=VirtualClock())
    sched.enqueue("a", ctx(2.0), 0)
    sched.enqueue("b", ctx(1.0), 1)
    assert sched.keys() == ["a", "b"]
    assert sched.head("b") == (ctx(1.0), 1)
    assert sched.head("zzz") is None
    assert sched.ready() == 2
    assert "buffered=2" in repr(sched)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_records": None, "max_seconds": None},
        {"max_records": 0},
        {"max_records": True},
        {"max_seconds": 0.0},
        {"max_seconds": -1.0},
        {"max_seconds": float("inf")},
    ],
)
def test_bad_quantum_settings(kwargs: dict[str, float | None]) -> None:
    with pytest.raises(ConfigError):
        Scheduler(EdfPolicy(), **kwargs)  # type: ignore[arg-type]


def test_drain_runs_everything_including_records_it_produces() -> None:
    sched: Scheduler[str, int] = Scheduler(EdfPolicy(), clock=VirtualClock(), max_records=2)
    seen: list[tuple[str, int]] = []

    def run(key: str, context: SchedulingContext, item: int) -> None:
        seen.append((key, item))
        if key == "a":
            sched.enqueue("b", ctx(context.frontier_time + 10), item)

    for i in range(3):
        sched.enqueue("a", ctx(1.0), i)
    assert drain(sched, run, max_batches=1) == 2
    assert drain(sched, run) == 4
    assert seen == [("a", 0), ("a", 1), ("a", 2), ("b", 0), ("b", 1), ("b", 2)]


class AgingPolicy(BasePolicy):
    """Priority improves with waiting time at a per-record rate (in ``path_cost``): it depends on now."""

    time_dependent = True

    def priority(self, ctx: SchedulingContext, now: float) -> float:
        return -(now - ctx.frontier_time) * ctx.path_cost


def _aging_ctx(arrival: float, rate: float) -> SchedulingContext:
    return SchedulingContext("p", "t", arrival, 0.0, 0.0, rate, 0, 1)


@pytest.mark.parametrize(("time_dependent", "expected"), [(True, "b"), (False, "a")])
def test_time_dependent_priorities_are_evaluated_at_pick_time(time_dependent: bool, expected: str) -> None:
    clock = VirtualClock(1.0)
    policy = AgingPolicy()
    policy.time_dependent = time_dependent  # type: ignore[misc]
    sched: Scheduler[str, int] = Scheduler(policy, clock=clock)
    sched.enqueue("a", _aging_ctx(0.0, 1.0), 0)  # at t=1: -1, at t=2: -2
    sched.enqueue("b", _aging_ctx(1.0, 3.0), 0)  # at t=1:  0, at t=2: -3
    clock.set(2.0)
    quantum = sched.next_batch()
    assert quantum is not None
    assert quantum.key == expected  # a heap keyed at enqueue time would still say "a"


# -- properties over random interleavings, for every policy ---------------------------------------


@dataclass(frozen=True)
class Enqueue:
    key: int
    deadline: int
    latency: int
    tenant: int
    path_cost: int


@dataclass(frozen=True)
class Pick:
    take: int
    run_time: int


@dataclass(frozen=True)
class Discard:
    key: int


_steps = st.lists(
    st.one_of(
        st.builds(
            Enqueue,
            st.integers(0, 5),
            st.integers(0, 20),
            st.integers(0, 20),
            st.sampled_from([0, 1, 2, 3, 3, 3]),  # 3: the key's own tenant, so tenants own partitions
            st.integers(0, 5),
        ),
        st.builds(Pick, st.integers(0, 5), st.integers(0, 4)),
        st.builds(Discard, st.integers(0, 5)),
    ),
    max_size=80,
)


def _make(policy_name: str) -> SchedulingPolicy:
    return (
        get_policy(policy_name, weights={"t0": 1.0, "t1": 2.0, "t2": 4.0})
        if policy_name == "fair"
        else get_policy(policy_name)
    )


def _pick_checked(
    sched: Scheduler[int, T],
    policy: SchedulingPolicy,
    queued: dict[int, list[SchedulingContext]],
    now: float,
) -> Quantum[int, T] | None:
    """The next quantum, checked against a brute force over the queued heads: ``None`` exactly when
    nothing is queued, else a quantum of a head with the best priority of all."""
    heads = {k: policy.priority(q[0], now) for k, q in queued.items() if q}
    quantum = sched.next_batch()
    if not heads:
        assert quantum is None
        return None
    assert quantum is not None
    assert heads[quantum.key] == min(heads.values()), "a head with a worse priority was picked"
    return quantum


def _reply(
    policy: SchedulingPolicy, context: SchedulingContext, key: int, run_time: float, now: float
) -> None:
    measured = Measurement(context.pipeline_id, f"op{key}", run_time, 0.0, now)
    policy.process_ctx_from_reply(policy.prepare_reply(context, measured))


# The aging policy has time-dependent priorities that improve while waiting: the scheduler must scan.
@pytest.mark.parametrize("policy_name", [*ALL_POLICIES, "tests.scheduling.test_scheduler:AgingPolicy"])
@settings(max_examples=150, deadline=None)
@given(steps=_steps, max_records=st.integers(1, 4))
def test_fifo_within_a_partition_and_best_head_first_under_any_policy(
    policy_name: str, steps: list[Enqueue | Pick | Discard], max_records: int
) -> None:
    policy = _make(policy_name)
    clock = VirtualClock()
    sched: Scheduler[int, tuple[int, int]] = Scheduler(
        policy, clock=clock, max_records=max_records, max_seconds=None
    )
    enqueued = [0] * 6  # per key: records enqueued so far (their sequence numbers)
    expected_next = [0] * 6  # per key: sequence number the next record out must have
    queued: dict[int, list[SchedulingContext]] = {k: [] for k in range(6)}

    def check_taken(key: int, item: tuple[int, int]) -> None:
        assert item[0] == key
        assert item[1] == expected_next[key], "records of one operator-partition left out of order"
        expected_next[key] += 1
        queued[key].pop(0)

    for step in steps:
        if isinstance(step, Enqueue):
            tenant = step.key % 3 if step.tenant == 3 else step.tenant
            context = SchedulingContext(
                f"pipe{tenant}",
                f"t{tenant}",
                float(step.deadline),
                float(step.latency),
                0.0,
                step.path_cost / 8,
                0,
                1,
            )
            sched.enqueue(step.key, context, (step.key, enqueued[step.key]))
            enqueued[step.key] += 1
            queued[step.key].append(context)
        elif isinstance(step, Discard):
            assert sched.discard(step.key) == len(queued[step.key])
            expected_next[step.key] = enqueued[step.key]
            queued[step.key].clear()
        else:
            quantum = _pick_checked(sched, policy, queued, clock.now())
            if quantum is None:
                continue
            for _ in range(step.take):
                try:
                    context, item = next(quantum)
                except StopIteration:
                    break
                check_taken(quantum.key, item)
                clock.advance(step.run_time / 16)
                _reply(policy, context, quantum.key, step.run_time / 16, clock.now())
            assert quantum.taken <= max_records
            quantum.close()
        assert len(sched) == sum(len(q) for q in queued.values())

    def run(key: int, context: SchedulingContext, item: tuple[int, int]) -> None:
        check_taken(key, item)
        _reply(policy, context, key, 1 / 16, clock.now())

    drain(sched, run)
    assert expected_next == enqueued
    assert len(sched) == 0


def test_user_policy_is_schedulable_by_import_path() -> None:
    policy = get_policy(USER_POLICY)
    sched: Scheduler[str, int] = Scheduler(policy, clock=VirtualClock())
    sched.enqueue("a", ctx(1.0, tenant="x"), 0)
    sched.enqueue("b", ctx(2.0, tenant="y"), 1)
    order: list[str] = []
    drain(sched, lambda key, _c, _i: order.append(key))
    assert order == ["b", "a"]  # MyPolicy runs the latest frontier first


def test_earliest_start_deadline_is_none_when_empty_and_the_earliest_head_otherwise() -> None:
    sched: Scheduler[str, int] = Scheduler(EdfPolicy(), clock=VirtualClock(), max_records=1, max_seconds=None)
    assert sched.earliest_start_deadline() is None
    # t_F + L - C: 10 + 2 - 0.5 for a, 11 + 0.25 - 0 for b (earlier), later records do not count.
    sched.enqueue("a", SchedulingContext("p", "t", 10.0, 2.0, 0.0, 0.5, 0, 1), 1)
    sched.enqueue("b", SchedulingContext("p", "t", 11.0, 0.25, 0.0, 0.0, 0, 2), 2)
    sched.enqueue("b", SchedulingContext("p", "t", 1.0, 0.0, 0.0, 0.0, 0, 3), 3)
    assert sched.earliest_start_deadline() == 11.25
    assert take(sched) == [("b", 2)]
    assert sched.earliest_start_deadline() == 1.0, "b's next head"
    assert take(sched) == [("b", 3)]
    assert sched.earliest_start_deadline() == 11.5
    assert take(sched) == [("a", 1)]
    assert sched.earliest_start_deadline() is None


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(
                st.sampled_from("abc"),
                st.floats(0, 100),
                st.floats(0, 5),
                st.floats(0, 1),
            ),
            st.just("take"),
        ),
        max_size=40,
    )
)
def test_earliest_start_deadline_against_brute_force(
    steps: list[tuple[str, float, float, float] | str],
) -> None:
    sched: Scheduler[str, int] = Scheduler(
        get_policy("cameo"), clock=VirtualClock(), max_records=1, max_seconds=None
    )
    queues: dict[str, list[float]] = {}
    for n, step in enumerate(steps):
        if isinstance(step, str):
            quantum = sched.next_batch()
            if quantum is None:
                continue
            for _ in quantum:
                queues[quantum.key].pop(0)
        else:
            key, frontier, target, cost = step
            sched.enqueue(key, SchedulingContext("p", "t", frontier, target, 0.0, cost, 0, n), n)
            queues.setdefault(key, []).append(frontier + target - cost)
        heads = [queue[0] for queue in queues.values() if queue]
        assert sched.earliest_start_deadline() == (min(heads) if heads else None)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(
                st.integers(0, 7),  # operator-partition
                st.integers(0, 40),  # t_F, in quarters
                st.integers(0, 12),  # L, in quarters
                st.integers(0, 12),  # path cost, in quarters (at most L: d <= t_F + L)
            ),
            st.integers(0, 6),  # a pick, after the clock advanced this many quarters
        ),
        max_size=60,
    )
)
def test_cameo_picks_the_best_head_when_start_deadline_and_target_far_apart(
    steps: list[tuple[int, int, int, int] | int],
) -> None:
    """cameo's two heaps order by the start deadline and judge tardiness by the target: the head
    picked must have the best priority of all heads, also when some turned tardy below the top."""
    policy = get_policy("cameo")
    clock = VirtualClock()
    sched: Scheduler[int, int] = Scheduler(policy, clock=clock, max_records=1, max_seconds=None)
    queued: dict[int, list[SchedulingContext]] = {k: [] for k in range(8)}
    for step in steps:
        if isinstance(step, int):
            clock.advance(step / 4)
            quantum = _pick_checked(sched, policy, queued, clock.now())
            if quantum is not None:
                assert [context for context, _ in quantum] == [queued[quantum.key].pop(0)]
        else:
            key, frontier, target, cost = step
            context = SchedulingContext("p", "t", frontier / 4, target / 4, 0.0, min(cost, target) / 4, 0, 1)
            sched.enqueue(key, context, 0)
            queued[key].append(context)
