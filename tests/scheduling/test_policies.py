"""Exact execution orders of each built-in policy, driven on a VirtualClock.

Costs, arrival times and latency targets are binary fractions so that every start time below is an
exact float: these tests compare with ``==`` and fail on any change of order or timing.
"""

from __future__ import annotations

import pytest

from cadenza.errors import ConfigError
from cadenza.scheduling import (
    CameoPolicy,
    CostModel,
    EdfPolicy,
    FairPolicy,
    FifoPolicy,
    OperatorInfo,
    Reply,
    SchedulingContext,
    SchedulingPolicy,
    SjfPolicy,
    SourceRecordInfo,
    start_deadline,
)
from tests.scheduling.sim import Arrival, burst, order, simulate, source


def _interleaved() -> list[Arrival]:
    return [
        source("p1", "t1", at=0.0, latency=10.0, offset=0, operator="a"),
        source("p2", "t2", at=0.125, latency=5.0, offset=0, operator="b"),
        source("p1", "t1", at=0.25, latency=10.0, offset=1, operator="a"),
        source("p3", "t3", at=0.375, latency=0.125, offset=0, operator="c"),
        source("p2", "t2", at=0.5, latency=5.0, offset=1, operator="b"),
    ]


def test_fifo_runs_in_arrival_order_across_operator_partitions() -> None:
    runs = simulate(FifoPolicy(), _interleaved(), cost={"a": 1.0, "b": 1.0, "c": 1.0})
    assert order(runs) == ["t1:0", "t2:0", "t1:1", "t3:0", "t2:1"]
    assert [r.start for r in runs] == [0.0, 1.0, 2.0, 3.0, 4.0]


def test_edf_reorders_the_same_input_by_deadline() -> None:
    runs = simulate(EdfPolicy(), _interleaved(), cost={"a": 1.0, "b": 1.0, "c": 1.0})
    # At t=1 the heads are t2:0 (due 5.125), t1:1 (10.25) and t3:0 (0.5); then t2:1 (5.5) beats t1:1.
    assert order(runs) == ["t1:0", "t3:0", "t2:0", "t2:1", "t1:1"]


def _tight_vs_loose() -> list[Arrival]:
    bulk = burst("ba-pipe", "BA", at=0.0, latency=8.0, count=16, operator="heavy")
    urgent = [
        source("ls-pipe", "LS", at=1 / 32, latency=1 / 8, offset=0, operator="light"),
        source("ls-pipe", "LS", at=9 / 32, latency=1 / 8, offset=1, operator="light"),
    ]
    return bulk + urgent


_TIGHT_COST = {"heavy": 1 / 16, "light": 1 / 64}


@pytest.mark.parametrize("policy_cls", [EdfPolicy, CameoPolicy])
def test_deadline_policies_run_the_tight_tenant_ahead_of_a_loose_burst(
    policy_cls: type[EdfPolicy] | type[CameoPolicy],
) -> None:
    runs = simulate(policy_cls(), _tight_vs_loose(), cost=_TIGHT_COST, max_records=4)
    expected = [f"BA:{i}" for i in range(4)] + ["LS:0"] + [f"BA:{i}" for i in range(4, 8)] + ["LS:1"]
    expected += [f"BA:{i}" for i in range(8, 16)]
    assert order(runs) == expected
    # Each urgent record waits only for the quantum in progress (4 x 1/16 s), never for the burst.
    assert [r.start for r in runs if r.tenant == "LS"] == [0.25, 33 / 64]


def test_fifo_makes_the_tight_tenant_wait_for_the_whole_burst() -> None:
    runs = simulate(FifoPolicy(), _tight_vs_loose(), cost=_TIGHT_COST, max_records=4)
    assert order(runs) == [f"BA:{i}" for i in range(16)] + ["LS:0", "LS:1"]
    assert [r.start for r in runs if r.tenant == "LS"] == [1.0, 1.0 + 1 / 64]


def _windows() -> list[Arrival]:
    arrivals = []
    for offset in range(2):
        arrivals.append(
            source("wf", "far", at=0.0, latency=1 / 4, offset=offset, operator="count-far", window_close=4.0)
        )
    for offset in range(2):
        arrivals.append(
            source(
                "wn", "near", at=0.0, latency=1 / 4, offset=offset, operator="count-near", window_close=1 / 16
            )
        )
    for offset in range(2):
        arrivals.append(source("ps", "s", at=0.0, latency=1 / 2, offset=offset, operator="map"))
    return arrivals


_WINDOW_COST = {"count-far": 1 / 64, "count-near": 1 / 64, "map": 1 / 64}


def test_cameo_lets_records_of_a_far_from_closing_window_yield() -> None:
    policy = CameoPolicy(CostModel(default_cost=1 / 1024))
    runs = simulate(policy, _windows(), cost=_WINDOW_COST, max_records=2)
    # Start deadlines: near window 1/16 + 1/4, stateless 1/2, far window 4 + 1/4 (all minus 1/1024).
    assert order(runs) == ["near:0", "near:1", "s:0", "s:1", "far:0", "far:1"]


def test_edf_ignores_window_frontiers() -> None:
    runs = simulate(EdfPolicy(CostModel(default_cost=1 / 1024)), _windows(), cost=_WINDOW_COST, max_records=2)
    # Both windowed pipelines are due at 0 + 1/4 (tie: enqueue order); the stateless one at 1/2.
    assert order(runs) == ["far:0", "far:1", "near:0", "near:1", "s:0", "s:1"]


def _long_and_short() -> tuple[CostModel, list[Arrival], dict[str, list[OperatorInfo]]]:
    costs = CostModel(recompute_tolerance=0.0)
    costs.add_pipeline("long", {"l1": ["l2"], "l2": ["l3"], "l3": []})
    costs.add_pipeline("short", {"s1": []})
    for pipeline, op in [("long", "l1"), ("long", "l2"), ("long", "l3"), ("short", "s1")]:
        costs.set_estimate(pipeline, op, 1 / 8)
    arrivals = [
        source("short", "S", at=0.0, latency=1.0, offset=0, operator="s1"),
        source("long", "L", at=0.0, latency=1.0, offset=0, operator="l1"),
    ]
    downstream = {"l1": [OperatorInfo("long", "l2")], "l2": [OperatorInfo("long", "l3")]}
    return costs, arrivals, downstream


def test_cameo_starts_the_record_with_the_longer_remaining_path_first() -> None:
    costs, arrivals, downstream = _long_and_short()
    assert costs.path_cost("long", "l1") == 3 / 8
    runs = simulate(
        CameoPolicy(costs),
        arrivals,
        cost=dict.fromkeys(["l1", "l2", "l3", "s1"], 1 / 8),
        downstream=downstream,
    )
    # Start deadlines: l1 5/8, l2 6/8, then l3 and s1 tie at 7/8 and s1 has waited longer.
    assert [r.key[0] for r in runs] == ["l1", "l2", "s1", "l3"]
    assert [r.hops for r in runs] == [0, 1, 0, 2]


def test_edf_does_not_see_path_costs() -> None:
    costs, arrivals, downstream = _long_and_short()
    runs = simulate(
        EdfPolicy(costs), arrivals, cost=dict.fromkeys(["l1", "l2", "l3", "s1"], 1 / 8), downstream=downstream
    )
    assert [r.key[0] for r in runs] == ["s1", "l1", "l2", "l3"]


def test_sjf_prefers_the_cheaper_operator() -> None:
    costs = CostModel()
    costs.set_estimate("ph", "heavy", 1 / 16)
    costs.set_estimate("pc", "cheap", 1 / 1024)
    arrivals = burst("ph", "H", at=0.0, latency=1.0, count=3, operator="heavy")
    arrivals += burst("pc", "C", at=0.0, latency=1.0, count=3, operator="cheap")
    runs = simulate(SjfPolicy(costs), arrivals, cost={"heavy": 1 / 16, "cheap": 1 / 1024})
    assert order(runs) == ["C:0", "C:1", "C:2", "H:0", "H:1", "H:2"]


def test_sjf_uses_the_estimate_of_the_receiving_operator() -> None:
    costs = CostModel()
    costs.set_estimate("p", "expensive", 2.0)
    policy = SjfPolicy(costs)
    ctx = policy.build_ctx_at_source(SourceRecordInfo("p", "t", 1.0, 0.0, 0, 0, operator_id="cheap"))
    assert policy.priority(ctx, 0.0) == (costs.default_cost, 0.0)
    out = policy.build_ctx_at_operator(ctx, OperatorInfo("p", "expensive"), None)
    assert policy.priority(out, 0.0) == (2.0, 0.0)


def test_fair_shares_by_weight_when_both_tenants_are_backlogged() -> None:
    policy = FairPolicy({"H": 4.0, "L": 1.0})
    arrivals = burst("ph", "H", at=0.0, latency=1.0, count=40, operator="h")
    arrivals += burst("pl", "L", at=0.0, latency=1.0, count=10, operator="l")
    runs = simulate(policy, arrivals, cost={"h": 1 / 1024, "l": 1 / 1024})
    tenants = "".join(r.tenant for r in runs)
    # After the first round the high-weight tenant gets exactly 4 runs per run of the low one.
    assert tenants[:21] == "HLHHHL" + "HHHHL" * 3
    assert tenants == "HLHHHL" + "HHHHL" * 8 + "H" * 4
    assert policy.normalized_service("H") == 40 / 4096
    assert policy.normalized_service("L") == 10 / 1024


def test_fair_accounts_per_tenant_across_its_operator_partitions() -> None:
    # H spreads its records over two operator-partitions; they share H's account, so H does not get
    # one turn per partition. (A heap trusting keys computed when each head arrived would run h1, h2.)
    arrivals = burst("ph", "H", at=0.0, latency=1.0, count=3, operator="h1")
    arrivals += burst("ph", "H", at=0.0, latency=1.0, count=3, operator="h2", first_offset=3)
    arrivals += burst("pl", "L", at=0.0, latency=1.0, count=6, operator="l")
    runs = simulate(FairPolicy(), arrivals, cost={"h1": 1 / 8, "h2": 1 / 8, "l": 1 / 8})
    assert [r.key[0] for r in runs] == ["h1", "l", "h2", "l"] * 3
    assert order(runs)[:4] == ["H:0", "L:0", "H:3", "L:1"]


def _flood() -> list[Arrival]:
    arrivals = burst("ph", "H", at=0.0, latency=60.0, count=200, operator="h")
    arrivals += [
        source("pl", "L", at=19.5 / 64, latency=60.0, offset=0, operator="l"),
        source("pl", "L", at=38.5 / 64, latency=60.0, offset=1, operator="l"),
    ]
    return arrivals


def test_fair_bounds_the_wait_of_a_low_weight_tenant_under_a_flood() -> None:
    runs = simulate(
        FairPolicy({"H": 8.0, "L": 1.0}), _flood(), cost={"h": 1 / 256, "l": 1 / 256}, max_records=4
    )
    low = [r for r in runs if r.tenant == "L"]
    # Quanta of 4 x 1/256 s end on multiples of 1/64 until L's first run shifts them by 1/256.
    assert [r.start for r in low] == [20 / 64, 157 / 256]
    waits = [r.start - arrival for r, arrival in zip(low, [19.5 / 64, 38.5 / 64], strict=True)]
    assert waits == [0.5 / 64, 3 / 256]
    assert max(waits) <= 4 / 256  # never more than the one quantum in progress
    assert len(runs) == 202


def test_fifo_lets_the_same_flood_delay_the_low_weight_tenant() -> None:
    runs = simulate(FifoPolicy(), _flood(), cost={"h": 1 / 256, "l": 1 / 256}, max_records=4)
    assert [r.start for r in runs if r.tenant == "L"] == [200 / 256, 201 / 256]


def test_fair_credit_of_an_idle_tenant_is_capped_by_burst() -> None:
    policy = FairPolicy({"H": 2.0, "L": 1.0}, burst=1 / 16)
    ctx_h = SchedulingContext("ph", "H", 0.0, 1.0, 0.0, 0.0, 0, 1)
    ctx_l = SchedulingContext("pl", "L", 0.0, 1.0, 0.0, 0.0, 0, 2)
    for _ in range(8):  # H alone gets 8 x 1/8 s of service: 1/2 normalized
        policy.process_ctx_from_reply(Reply("ph", "h", "H", 1 / 8, 0.0, 0.0))
    # H entered lifted to V - burst = -1/16, so its eighth run started at 6/16, which is now V.
    assert policy.virtual_time == 7 / 16 - 1 / 16
    assert policy.normalized_service("L") == policy.virtual_time - 1 / 16
    assert policy.credit("L") == 1 / 16  # burst x weight 1
    assert policy.priority(ctx_l, 0.0) < policy.priority(ctx_h, 0.0)
    policy.process_ctx_from_reply(Reply("pl", "l", "L", 1 / 4, 0.0, 0.0))
    assert policy.credit("L") == -(1 / 4 - 1 / 16)


def test_fair_refuses_bad_weights() -> None:
    with pytest.raises(ConfigError, match="weight of tenant 'x'"):
        FairPolicy({"x": 0.0})
    with pytest.raises(ConfigError, match="burst"):
        FairPolicy(burst=-1.0)


@pytest.mark.parametrize(
    ("operator", "expected_frontier"),
    [
        (OperatorInfo("p", "win", is_windowed=True, window_close_time=5.0), 5.0),
        (OperatorInfo("p", "win", is_windowed=True, window_close_time=0.5), 1.0),  # late record
        (OperatorInfo("p", "map", is_windowed=False, window_close_time=5.0), 1.0),
        (OperatorInfo("p", "win", is_windowed=True, window_close_time=None), 1.0),
    ],
)
def test_cameo_frontier_at_operator(operator: OperatorInfo, expected_frontier: float) -> None:
    policy = CameoPolicy(CostModel(default_cost=1 / 4))
    ctx_in = SchedulingContext("p", "t", 1.0, 2.0, 0.0, 0.0, 3, 99)
    out = policy.build_ctx_at_operator(ctx_in, operator, object())
    assert out.frontier_time == expected_frontier
    assert out.priority == expected_frontier + 2.0 - 1 / 4
    assert policy.priority(out, 0.0) == out.priority  # on time, the stamped start deadline


def test_cameo_frontier_at_source_for_a_windowed_first_operator() -> None:
    policy: SchedulingPolicy = CameoPolicy(CostModel(default_cost=0.0))
    rec = SourceRecordInfo("p", "t", 0.5, 2.0, 7, 0, operator_id="win", window_close_time=10.0)
    assert policy.build_ctx_at_source(rec).frontier_time == 10.0
    assert EdfPolicy().build_ctx_at_source(rec).frontier_time == 2.0


def _overloaded_bulk_then_urgent() -> list[Arrival]:
    # 12 bulk records of 1/4 s each, all due 1 s after arriving: 3 s of work, so from t=1 the bulk
    # backlog is tardy. Urgent records arrive at 1.5 and 1.75, due 1/2 s later.
    bulk = burst("ba-pipe", "BA", at=0.0, latency=1.0, count=12, operator="heavy")
    urgent = [
        source("ls-pipe", "LS", at=1.5, latency=1 / 2, offset=0, operator="light"),
        source("ls-pipe", "LS", at=1.75, latency=1 / 2, offset=1, operator="light"),
    ]
    return bulk + urgent


_OVERLOAD_COST = {"heavy": 1 / 4, "light": 1 / 16}


def test_cameo_runs_tardy_bulk_work_after_on_time_records() -> None:
    runs = simulate(
        CameoPolicy(CostModel(default_cost=0.0)), _overloaded_bulk_then_urgent(), cost=_OVERLOAD_COST
    )
    # BA:4 starts exactly at its start deadline (1.0), so it is still on time; from BA:5 on the bulk
    # records are tardy, and each urgent record waits only for the bulk record in progress.
    assert order(runs) == [f"BA:{i}" for i in range(6)] + ["LS:0", "BA:6", "LS:1"] + [
        f"BA:{i}" for i in range(7, 12)
    ]
    assert [r.start for r in runs if r.tenant == "LS"] == [1.5, 1.8125]
    # Work-conserving: the last record ends when it would under any order.
    assert runs[-1].end == 3.125


def test_plain_cameo_lets_a_tardy_backlog_make_the_urgent_tenant_miss_too() -> None:
    policy = CameoPolicy(CostModel(default_cost=0.0), postpone_tardy=False)
    runs = simulate(policy, _overloaded_bulk_then_urgent(), cost=_OVERLOAD_COST)
    assert order(runs) == [f"BA:{i}" for i in range(12)] + ["LS:0", "LS:1"]
    # Due at 2.0 and 2.25, started at 3.0: the domino effect postponement prevents.
    assert [r.start for r in runs if r.tenant == "LS"] == [3.0, 3.0625]
    assert runs[-1].end == 3.125


def test_cameo_postpones_a_tardy_record_to_one_target_from_now() -> None:
    policy = CameoPolicy(CostModel(default_cost=0.0))
    on_time = SchedulingContext("p", "t", 10.0, 5.0, 0.0, 0.0, 0, 1)  # start deadline 15
    tardy_loose = SchedulingContext("p", "t", 0.0, 5.0, 0.0, 0.0, 0, 2)  # due 5, postponed to 17
    tardy_tight = SchedulingContext("p", "t", 9.0, 0.5, 0.0, 0.0, 0, 3)  # due 9.5, postponed to 12.5
    tardy_mid = SchedulingContext("p", "t", 0.0, 2.0, 0.0, 0.0, 0, 4)  # due 2, postponed to 14
    now = 12.0
    assert [policy.priority(ctx, now) for ctx in (on_time, tardy_loose, tardy_tight, tardy_mid)] == [
        15.0,
        17.0,
        12.5,
        14.0,
    ]
    # A record a little late still goes before bulk work due later; a long-late one does not jump ahead.
    ranked = sorted([tardy_loose, tardy_tight, on_time, tardy_mid], key=lambda ctx: policy.priority(ctx, now))
    assert [ctx.trace_id for ctx in ranked] == [3, 4, 1, 2]


def test_cameo_keeps_a_record_past_its_start_deadline_first_until_its_target_has_passed() -> None:
    # The path cost is planned at the tail (a repartition hop's p99), so a record past its start
    # deadline may still make its target: it keeps its start deadline (in the past: before all work
    # on time) and is postponed only once its result is late (t_F + L passed).
    policy = CameoPolicy(CostModel(default_cost=0.0))
    urgent = SchedulingContext("p", "ls", 10.0, 0.3, 0.0, 0.25, 0, 1)  # start deadline 10.05, due 10.3
    bulk = SchedulingContext("p", "ba", 5.5, 5.0, 0.0, 0.0, 0, 2)  # start deadline 10.5
    assert policy.deadline_parts(urgent) == (start_deadline(urgent), 10.3, 0.3)
    # Past its start deadline, not late: first (postponed, it would have been due at 10.55, after bulk).
    assert policy.priority(urgent, 10.25) == start_deadline(urgent) < policy.priority(bulk, 10.25) == 10.5
    # Late: one target from now (10.7), behind the bulk record still due at 10.5.
    assert policy.priority(urgent, 10.4) == pytest.approx(10.7)
    assert policy.priority(bulk, 10.4) == 10.5


def test_cameo_priority_only_worsens_as_time_passes() -> None:
    # The scheduler re-keys its heap lazily on this promise (monotone_priority).
    policy = CameoPolicy(CostModel(default_cost=0.0))
    ctx = SchedulingContext("p", "t", 1.0, 0.5, 0.0, 0.0, 0, 1)
    assert [policy.priority(ctx, now) for now in (0.0, 1.5, 1.75, 2.5)] == [1.5, 1.5, 2.25, 3.0]
    assert CameoPolicy.time_dependent and CameoPolicy.monotone_priority


@pytest.mark.parametrize("postpone_tardy", [True, False])
def test_cameo_orders_an_on_time_record_by_the_one_start_deadline(postpone_tardy: bool) -> None:
    # The worker paces warm copies by start_deadline; cameo must order by the very same value.
    policy = CameoPolicy(CostModel(default_cost=0.0), postpone_tardy=postpone_tardy)
    ctx = SchedulingContext("p", "t", 100.0, 0.25, 0.0, 0.0625, 0, 1)
    assert start_deadline(ctx) == 100.1875
    assert policy.priority(ctx, 100.0) == start_deadline(ctx)
    assert policy.deadline_parts(ctx) == (start_deadline(ctx), 100.25, 0.25)
    assert policy.priority(ctx, 101.0) == (101.25 if postpone_tardy else start_deadline(ctx))
