"""The contract every policy honours, checked for each built-in and for a user policy by import path."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import pytest

from cadenza.scheduling import (
    HOOKS,
    Measurement,
    OperatorInfo,
    Reply,
    SchedulingContext,
    SchedulingPolicy,
    SourceRecordInfo,
    decode_context,
    encode_context,
    get_policy,
)

POLICIES = ["fifo", "edf", "cameo", "sjf", "fair", "tests.scheduling.test_policy_loader:MyPolicy"]


@pytest.fixture(params=POLICIES)
def policy(request: pytest.FixtureRequest) -> SchedulingPolicy:
    name = request.param
    assert isinstance(name, str)
    return get_policy(name)


def _records() -> list[SourceRecordInfo]:
    return [
        SourceRecordInfo("p1", "gold", 0.1, 1_700_000_000.0, 0, 0),
        SourceRecordInfo("p1", "gold", 0.1, 1_700_000_000.5, 1, 0, operator_id="filter"),
        SourceRecordInfo(
            "p2", "bronze", 60.0, 1_700_000_000.25, 7, 3, operator_id="agg", window_close_time=1_700_000_010.0
        ),
        SourceRecordInfo("p3", "bronze", 0.0, 0.0, 0, 0, trace_id=2**64 - 1),
    ]


def test_hooks_exist(policy: SchedulingPolicy) -> None:
    for hook in HOOKS:
        assert callable(getattr(policy, hook))
    assert isinstance(policy.name, str)
    assert isinstance(getattr(policy, "time_dependent", False), bool)


def test_build_ctx_at_source(policy: SchedulingPolicy) -> None:
    for record in _records():
        ctx = policy.build_ctx_at_source(record)
        assert type(ctx) is SchedulingContext
        assert (ctx.pipeline_id, ctx.tenant_id, ctx.latency_target) == (
            record.pipeline_id,
            record.tenant_id,
            record.latency_target,
        )
        assert ctx.hops == 0
        assert isinstance(ctx.trace_id, int)
        assert 0 <= ctx.trace_id < 2**64
        if record.trace_id is not None:
            assert ctx.trace_id == record.trace_id
        assert ctx.frontier_time >= record.arrival_time  # a frontier is never before the input arrived
        assert ctx.path_cost >= 0.0
        assert decode_context(encode_context(ctx)) is not None  # it can cross Kafka


def test_fresh_trace_ids_differ(policy: SchedulingPolicy) -> None:
    record = _records()[0]
    ids = {policy.build_ctx_at_source(record).trace_id for _ in range(50)}
    assert len(ids) == 50


def test_build_ctx_at_operator_keeps_identity_and_counts_hops(policy: SchedulingPolicy) -> None:
    ctx = policy.build_ctx_at_source(_records()[1])
    for hop, operator in enumerate(
        [
            OperatorInfo("p1", "key_by"),
            OperatorInfo("p1", "count", is_windowed=True, window_close_time=1_700_000_001.0),
        ],
        start=1,
    ):
        out = policy.build_ctx_at_operator(ctx, operator, {"payload": hop})
        assert type(out) is SchedulingContext
        assert out is not ctx
        assert out.hops == ctx.hops + 1 == hop
        assert (out.pipeline_id, out.tenant_id, out.trace_id, out.latency_target) == (
            ctx.pipeline_id,
            ctx.tenant_id,
            ctx.trace_id,
            ctx.latency_target,
        )
        assert out.frontier_time >= ctx.frontier_time
        assert decode_context(encode_context(out)) is not None
        ctx = out


def test_reply_hooks(policy: SchedulingPolicy) -> None:
    ctx = policy.build_ctx_at_source(_records()[0])
    measured = Measurement("p1", "filter", 0.002, 0.01, 1_700_000_000.2)
    reply = policy.prepare_reply(ctx, measured)
    assert type(reply) is Reply
    assert (reply.pipeline_id, reply.operator_id, reply.run_time) == ("p1", "filter", 0.002)
    assert policy.process_ctx_from_reply(reply) is None


def _contexts(policy: SchedulingPolicy) -> list[SchedulingContext]:
    contexts = [policy.build_ctx_at_source(r) for r in _records()]
    contexts += [policy.build_ctx_at_operator(c, OperatorInfo(c.pipeline_id, "next"), None) for c in contexts]
    contexts.append(SchedulingContext("p9", "new-tenant", 5.0, 0.5, 0.0, 0.25, 3, 9))
    return contexts


def _consistent(a: object, b: object, lt: Callable[[object, object], bool]) -> None:
    relations = [lt(a, b), a == b, lt(b, a)]
    assert relations.count(True) == 1, f"{a!r} and {b!r} are not totally ordered"


def test_priorities_are_totally_ordered(policy: SchedulingPolicy) -> None:
    contexts = _contexts(policy)
    for now in [0.0, 1_700_000_000.0]:
        priorities = [policy.priority(c, now) for c in contexts]
        kinds = {type(p) for p in priorities}
        assert len(kinds) == 1, "one policy must return one kind of priority"
        for p in priorities:
            flat = p if isinstance(p, tuple) else (p,)
            assert all(isinstance(x, int | float) and not math.isnan(x) for x in flat)
        for a, b in itertools.product(priorities, repeat=2):
            _consistent(a, b, lambda x, y: x < y)  # type: ignore[operator]
        assert sorted(priorities) == sorted(reversed(priorities))


def test_priority_is_deterministic_for_a_given_state(policy: SchedulingPolicy) -> None:
    for ctx in _contexts(policy):
        assert policy.priority(ctx, 3.0) == policy.priority(ctx, 3.0)


def test_a_monotone_priority_only_worsens_as_time_passes() -> None:
    # The scheduler keeps stale heap keys as lower bounds on this promise (monotone_priority); a
    # policy that broke it would have records run out of order without any error.
    checked = []
    for name in POLICIES:
        policy = get_policy(name)
        if not (getattr(policy, "time_dependent", False) and getattr(policy, "monotone_priority", False)):
            continue
        checked.append(policy.name)
        for record in _records():
            ctx = policy.build_ctx_at_source(record)
            start = record.arrival_time
            times = [start - 1.0, start, start + 0.05, start + 0.5, start + 5.0, start + 120.0, start + 1e6]
            priorities = [policy.priority(ctx, now) for now in times]
            assert all(
                a <= b  # type: ignore[operator]  # one policy's priorities are comparable
                for a, b in itertools.pairwise(priorities)
            ), (name, record, priorities)
    assert sorted(checked) == ["cameo", "fair"]
