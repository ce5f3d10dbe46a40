"""What a policy may rely on and declare, from the base class (issue 18, item 5).

A user policy subclasses :class:`SchedulingPolicy`, implements the hooks and inherits a default for
every declaration the scheduler and the worker read; the loader refuses, at start-up and with a
message naming the fault, a class or object that breaks the contract. Pure logic: no broker.
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from cadenza.errors import ConfigError
from cadenza.pipelines import Pipeline, PipelineGraph
from cadenza.scheduling import (
    CostModel,
    FairPolicy,
    Measurement,
    OperatorInfo,
    Reply,
    Scheduler,
    SchedulingContext,
    SchedulingPolicy,
    SourceRecordInfo,
    VirtualClock,
    get_policy,
)
from cadenza.scheduling.registry import check_policy, resolve_policy
from cadenza.worker.layout import make_policy
from tests.scheduling.test_policy_loader import DuckPolicy

HERE = "tests.scheduling.test_policy_declarations"


class Minimal(SchedulingPolicy):
    """Only the hooks: every declaration comes from the base class."""

    def build_ctx_at_source(self, record: SourceRecordInfo) -> SchedulingContext:
        return SchedulingContext(
            record.pipeline_id, record.tenant_id, record.arrival_time, record.latency_target, 0.0, 0.0, 0, 1
        )

    def build_ctx_at_operator(
        self, ctx_in: SchedulingContext, operator: OperatorInfo, output: object
    ) -> SchedulingContext:
        return ctx_in

    def prepare_reply(self, ctx: SchedulingContext, measured: Measurement) -> Reply:
        return Reply(
            measured.pipeline_id, measured.operator_id, ctx.tenant_id, measured.run_time, 0.0, measured.at
        )

    def process_ctx_from_reply(self, reply: Reply) -> None:
        return None

    def priority(self, ctx: SchedulingContext, now: float) -> float:
        return ctx.frontier_time


class Weighted(Minimal):
    """Relies on the contract: learns into a cost model, takes tenant weights, orders by them."""

    def __init__(self) -> None:
        self.cost_model = CostModel(default_cost=0.0)
        self.weights: dict[str, float] = {}

    def set_tenant_weights(self, weights: Mapping[str, float]) -> None:
        self.weights = dict(weights)

    def priority(self, ctx: SchedulingContext, now: float) -> float:
        return ctx.frontier_time / self.weights.get(ctx.tenant_id, 1.0)


class Postponing(Minimal):
    """Declares the tardy-postponing shape: the scheduler must use deadline_parts, never priority."""

    time_dependent = True

    @property
    def postpones_tardy(self) -> bool:
        return True

    def deadline_parts(self, ctx: SchedulingContext) -> tuple[float, float, float]:
        return ctx.frontier_time, ctx.frontier_time, ctx.latency_target

    def priority(self, ctx: SchedulingContext, now: float) -> float:
        raise AssertionError("a policy that postpones tardy records is never asked for a priority")


class StringlyFlagged(Minimal):
    time_dependent = "yes"  # type: ignore[assignment]


class PostponesWithoutParts(Minimal):
    @property
    def postpones_tardy(self) -> bool:
        return True


class ComputesABadFlag(Postponing):
    @property
    def postpones_tardy(self) -> bool:
        return 1  # type: ignore[return-value]


class WrongCostModel(Minimal):
    def __init__(self) -> None:
        self.cost_model = {"p": 0.1}  # type: ignore[assignment]


class RefusesWeights(Minimal):
    def set_tenant_weights(self, weights: Mapping[str, float]) -> None:
        raise KeyError("gold")


def graph(name: str, tenant: str, weight: float) -> PipelineGraph:
    p = Pipeline(name, tenant=tenant, latency_target="1s", tenant_weight=weight)
    p.source(f"{name}-in").sink(f"{name}-out")
    return p.compile()


def test_a_subclass_with_only_the_hooks_gets_the_defaults() -> None:
    policy = get_policy(f"{HERE}:Minimal")
    declared = (
        policy.time_dependent,
        policy.monotone_priority,
        policy.shares_source_contexts,
        policy.keeps_hook_info,
        policy.postpones_tardy,
        policy.cost_model,
        policy.name,
    )
    assert declared == (False, False, False, False, False, None, "custom")
    policy.set_tenant_weights({"gold": 4.0})  # ignored: a policy that does not divide by tenant
    with pytest.raises(NotImplementedError, match="Minimal does not postpone tardy records"):
        policy.deadline_parts(SchedulingContext("p", "t", 0.0, 1.0, 0.0, 0.0, 0, 1))
    # The scheduler runs it as it declares: a static priority, computed once per head.
    sched: Scheduler[str, int] = Scheduler(policy, clock=VirtualClock())
    sched.enqueue("late", SchedulingContext("p", "t", 5.0, 1.0, 0.0, 0.0, 0, 1), 1)
    sched.enqueue("early", SchedulingContext("p", "t", 2.0, 1.0, 0.0, 0.0, 0, 2), 2)
    quantum = sched.next_batch()
    assert quantum is not None and quantum.key == "early"


def test_the_worker_hands_its_tenants_weights_to_a_policy_it_creates() -> None:
    graphs = [graph("a", "gold", 4.0), graph("b", "bronze", 0.5)]
    user = make_policy(f"{HERE}:Weighted", graphs)
    assert isinstance(user, Weighted)
    assert user.weights == {"gold": 4.0, "bronze": 0.5}
    fair = make_policy("fair", graphs)
    assert isinstance(fair, FairPolicy)
    assert (fair.weight("gold"), fair.weight("bronze"), fair.weight("other")) == (4.0, 0.5, 1.0)
    # A policy object is run as its creator configured it.
    given = Weighted()
    assert make_policy(given, graphs) is given
    assert given.weights == {}
    # Its cost model is the worker's (what the plan registers the pipelines' DAGs in).
    assert isinstance(user.cost_model, CostModel)


def test_the_scheduler_orders_a_postponing_policy_by_its_deadline_parts() -> None:
    clock = VirtualClock(10.0)
    sched: Scheduler[str, int] = Scheduler(get_policy(f"{HERE}:Postponing"), clock=clock, max_records=1)
    # On time: by start deadline. Tardy (deadline 1 < now 10): competes as due at now + its target.
    sched.enqueue("tardy", SchedulingContext("p", "bulk", 1.0, 30.0, 0.0, 0.0, 0, 1), 1)
    sched.enqueue("soon", SchedulingContext("p", "ls", 12.0, 1.0, 0.0, 0.0, 0, 2), 2)
    sched.enqueue("later", SchedulingContext("p", "ls", 50.0, 1.0, 0.0, 0.0, 0, 3), 3)
    order = []
    while (quantum := sched.next_batch()) is not None:
        order.append(quantum.key)
        for _ in quantum:
            pass
    assert order == ["soon", "tardy", "later"]


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("StringlyFlagged", r"declares time_dependent = 'yes'; .* True or False"),
        ("PostponesWithoutParts", "declares postpones_tardy but does not implement deadline_parts"),
        ("ComputesABadFlag", "postpones_tardy is 1"),
        ("WrongCostModel", "cost_model is a dict, not a CostModel or None"),
    ],
)
def test_a_policy_breaking_the_contract_is_refused_at_load(name: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        get_policy(f"{HERE}:{name}")


def test_a_policy_object_breaking_the_contract_is_refused_before_the_worker_runs_it() -> None:
    with pytest.raises(ConfigError, match="cost_model is a dict"):
        make_policy(WrongCostModel(), [graph("a", "gold", 1.0)])
    with pytest.raises(ConfigError, match="'DuckPolicy\\(\\)' does not subclass"):
        check_policy(DuckPolicy(), "DuckPolicy()")


def test_a_policy_refusing_the_tenant_weights_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"refused the tenant weights \{'gold': 2.0\}: KeyError"):
        resolve_policy(f"{HERE}:RefusesWeights", {"gold": 2.0})
