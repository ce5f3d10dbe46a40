"""A deterministic executor stand-in: drives a policy and a scheduler on a VirtualClock.

Arrivals enter through ``build_ctx_at_source`` when the clock reaches them, each run advances the
clock by the operator's cost and sends a reply through the policy's hooks, and outputs flow to
downstream operators through ``build_ctx_at_operator``, as the worker will do. The result is the
exact sequence of runs, which the policy tests assert on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from cadenza.scheduling import (
    Measurement,
    OperatorInfo,
    Scheduler,
    SchedulingContext,
    SchedulingPolicy,
    SourceRecordInfo,
    VirtualClock,
)

Key = tuple[str, int]  # (operator id, partition)


@dataclass(frozen=True)
class Arrival:
    time: float
    operator_id: str
    record: SourceRecordInfo


@dataclass(frozen=True)
class Item:
    tag: str
    offset: int
    enqueued: float


@dataclass(frozen=True)
class Run:
    start: float
    end: float
    key: Key
    tag: str
    offset: int
    tenant: str
    hops: int


def source(
    pipeline: str,
    tenant: str,
    *,
    at: float,
    latency: float,
    offset: int,
    operator: str,
    partition: int = 0,
    window_close: float | None = None,
) -> Arrival:
    return Arrival(
        at,
        operator,
        SourceRecordInfo(
            pipeline_id=pipeline,
            tenant_id=tenant,
            latency_target=latency,
            arrival_time=at,
            offset=offset,
            partition=partition,
            operator_id=operator,
            window_close_time=window_close,
        ),
    )


def burst(
    pipeline: str, tenant: str, *, at: float, latency: float, count: int, operator: str, first_offset: int = 0
) -> list[Arrival]:
    return [
        source(pipeline, tenant, at=at, latency=latency, offset=first_offset + i, operator=operator)
        for i in range(count)
    ]


def simulate(
    policy: SchedulingPolicy,
    arrivals: Iterable[Arrival],
    *,
    cost: Mapping[str, float] | Callable[[str], float],
    clock: VirtualClock | None = None,
    max_records: int | None = 1,
    max_seconds: float | None = None,
    downstream: Mapping[str, Sequence[OperatorInfo]] | None = None,
) -> list[Run]:
    """Run everything to completion and return the runs in execution order.

    ``cost`` gives each operator's (exact) run time; arrivals are admitted in time order, also
    between the records of a quantum, so they can only wait for it, never preempt it.
    """
    clock = clock if clock is not None else VirtualClock(0.0)
    cost_of = cost if callable(cost) else cost.__getitem__
    sched: Scheduler[Key, Item] = Scheduler(
        policy, clock=clock, max_records=max_records, max_seconds=max_seconds
    )
    pending = sorted(arrivals, key=lambda a: a.time)
    nxt = 0
    runs: list[Run] = []
    down = downstream or {}

    def admit() -> None:
        nonlocal nxt
        while nxt < len(pending) and pending[nxt].time <= clock.now():
            arrival = pending[nxt]
            rec = arrival.record
            ctx = policy.build_ctx_at_source(rec)
            sched.enqueue(
                (arrival.operator_id, rec.partition), ctx, Item(rec.tenant_id, rec.offset, clock.now())
            )
            nxt += 1

    while True:
        admit()
        quantum = sched.next_batch()
        if quantum is None:
            if nxt == len(pending):
                return runs
            clock.set(pending[nxt].time)
            continue
        key = quantum.key
        operator_id, partition = key
        for ctx, item in quantum:
            start = clock.now()
            clock.advance(cost_of(operator_id))
            measured = Measurement(
                ctx.pipeline_id, operator_id, clock.now() - start, start - item.enqueued, clock.now()
            )
            policy.process_ctx_from_reply(policy.prepare_reply(ctx, measured))
            runs.append(Run(start, clock.now(), key, item.tag, item.offset, ctx.tenant_id, ctx.hops))
            for target in down.get(operator_id, ()):
                out: SchedulingContext = policy.build_ctx_at_operator(ctx, target, item)
                sched.enqueue((target.operator_id, partition), out, Item(item.tag, item.offset, clock.now()))
            admit()


def order(runs: Iterable[Run]) -> list[str]:
    """Compact view of an execution order: ``tag:offset`` per run."""
    return [f"{r.tag}:{r.offset}" for r in runs]
