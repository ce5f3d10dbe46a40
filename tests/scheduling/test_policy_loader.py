"""Loading policies by name and by import path, and the errors a typo or a bad class produce.

``MyPolicy`` below is the user policy the loader, contract and scheduler tests load as
``tests.scheduling.test_policy_loader:MyPolicy``, the way a user's settings would name it.
"""

from __future__ import annotations

import pytest

from cadenza.errors import ConfigError
from cadenza.scheduling import (
    BUILTIN_POLICIES,
    CameoPolicy,
    CostModel,
    EdfPolicy,
    FairPolicy,
    FifoPolicy,
    Measurement,
    OperatorInfo,
    Reply,
    SchedulingContext,
    SchedulingPolicy,
    SjfPolicy,
    SourceRecordInfo,
    get_policy,
    load_policy_class,
    new_trace_id,
)

HERE = "tests.scheduling.test_policy_loader"


class MyPolicy(SchedulingPolicy):
    """Freshest data first (e.g. for a live dashboard): the latest frontier runs first.

    Written against the bare interface, without BasePolicy, as a user would.
    """

    name = "freshest"

    def __init__(self, bias: float = 0.0) -> None:
        self.bias = bias
        self.replies = 0

    def build_ctx_at_source(self, record: SourceRecordInfo) -> SchedulingContext:
        trace = new_trace_id() if record.trace_id is None else record.trace_id
        return SchedulingContext(
            record.pipeline_id,
            record.tenant_id,
            record.arrival_time,
            record.latency_target,
            0.0,
            0.0,
            0,
            trace,
        )

    def build_ctx_at_operator(
        self, ctx_in: SchedulingContext, operator: OperatorInfo, output: object
    ) -> SchedulingContext:
        return SchedulingContext(
            ctx_in.pipeline_id,
            ctx_in.tenant_id,
            ctx_in.frontier_time,
            ctx_in.latency_target,
            -ctx_in.frontier_time,
            0.0,
            ctx_in.hops + 1,
            ctx_in.trace_id,
        )

    def prepare_reply(self, ctx: SchedulingContext, measured: Measurement) -> Reply:
        return Reply(
            measured.pipeline_id, measured.operator_id, ctx.tenant_id, measured.run_time, 0.0, measured.at
        )

    def process_ctx_from_reply(self, reply: Reply) -> None:
        self.replies += 1

    def priority(self, ctx: SchedulingContext, now: float) -> tuple[float, int]:
        return (self.bias - ctx.frontier_time, ctx.hops)


class DuckPolicy:
    """Has every hook but does not subclass SchedulingPolicy: refused, for it lacks the declarations
    the worker reads (see test_policy_declarations)."""

    def build_ctx_at_source(self, record: SourceRecordInfo) -> SchedulingContext:
        raise NotImplementedError

    def build_ctx_at_operator(
        self, ctx_in: SchedulingContext, operator: OperatorInfo, output: object
    ) -> SchedulingContext:
        raise NotImplementedError

    def prepare_reply(self, ctx: SchedulingContext, measured: Measurement) -> Reply:
        raise NotImplementedError

    def process_ctx_from_reply(self, reply: Reply) -> None:
        raise NotImplementedError

    def priority(self, ctx: SchedulingContext, now: float) -> float:
        return 0.0


class HalfPolicy(SchedulingPolicy):  # forgot priority and process_ctx_from_reply
    def build_ctx_at_source(self, record: SourceRecordInfo) -> SchedulingContext:
        raise NotImplementedError

    def build_ctx_at_operator(
        self, ctx_in: SchedulingContext, operator: OperatorInfo, output: object
    ) -> SchedulingContext:
        raise NotImplementedError

    def prepare_reply(self, ctx: SchedulingContext, measured: Measurement) -> Reply:
        raise NotImplementedError


class NotAPolicy:
    def priority(self, ctx: SchedulingContext, now: float) -> float:
        return 0.0


class ExplodingPolicy(MyPolicy):
    def __init__(self) -> None:
        raise RuntimeError("no database")


NOT_A_CLASS = 42


@pytest.mark.parametrize(
    ("name", "cls"),
    [
        ("fifo", FifoPolicy),
        ("edf", EdfPolicy),
        ("cameo", CameoPolicy),
        ("sjf", SjfPolicy),
        ("fair", FairPolicy),
    ],
)
def test_builtin_names(name: str, cls: type[SchedulingPolicy]) -> None:
    assert BUILTIN_POLICIES[name] is cls
    policy = get_policy(name)
    assert type(policy) is cls
    assert policy.name == name
    assert type(get_policy(f"  {name.upper()} ")) is cls


def test_builtin_policies_take_options() -> None:
    costs = CostModel()
    cameo = get_policy("cameo", cost_model=costs)
    assert isinstance(cameo, CameoPolicy)
    assert cameo.cost_model is costs
    fair = get_policy("fair", weights={"gold": 4.0}, default_weight=0.5)
    assert isinstance(fair, FairPolicy)
    assert (fair.weight("gold"), fair.weight("anyone")) == (4.0, 0.5)


def test_user_policy_by_import_path() -> None:
    policy = get_policy(f"{HERE}:MyPolicy", bias=2.0)
    assert isinstance(policy, MyPolicy)
    assert policy.bias == 2.0
    assert load_policy_class(f"{HERE}:MyPolicy") is MyPolicy


def test_a_class_with_the_hooks_but_not_the_base_is_refused() -> None:
    with pytest.raises(
        ConfigError, match=r"DuckPolicy' does not subclass cadenza.scheduling.SchedulingPolicy"
    ):
        load_policy_class(f"{HERE}:DuckPolicy")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            "lifo",
            r"unknown scheduling policy 'lifo'; use one of fifo, edf, cameo, sjf, fair, "
            r"or 'package.module:ClassName'",
        ),
        (
            "tests.scheduling.test_policy_loader.MyPolicy",
            "unknown scheduling policy .*'package.module:ClassName'",
        ),
        ("", "must be a non-empty name"),
        (":MyPolicy", "not of the form 'package.module:ClassName'"),
        (f"{HERE}:", "not of the form 'package.module:ClassName'"),
        (
            "tests.scheduling.no_such_module:Policy",
            r"cannot import module 'tests.scheduling.no_such_module'.*ModuleNotFoundError",
        ),
        (
            "tests.scheduling.broken_policy_module:Policy",
            "cannot import module .*RuntimeError: this module is broken on purpose",
        ),
        (f"{HERE}:Missing", f"module '{HERE}' has no attribute 'Missing'"),
        (f"{HERE}:NOT_A_CLASS", "is a int, not a class"),
        (
            f"{HERE}:NotAPolicy",
            "does not subclass cadenza.scheduling.SchedulingPolicy.* \\(missing: build_ctx_at_source, "
            "build_ctx_at_operator, prepare_reply, process_ctx_from_reply\\)",
        ),
        (f"{HERE}:HalfPolicy", "missing or abstract: priority, process_ctx_from_reply"),
    ],
)
def test_load_errors_are_config_errors(spec: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        get_policy(spec)


def test_bad_options_are_config_errors() -> None:
    with pytest.raises(ConfigError, match=r"'edf' cannot be created with options \['weights'\]: TypeError"):
        get_policy("edf", weights={"a": 1.0})
    with pytest.raises(ConfigError, match="weight of tenant 'a' must be a positive finite number"):
        get_policy("fair", weights={"a": -1.0})
    with pytest.raises(ConfigError, match="RuntimeError: no database"):
        get_policy(f"{HERE}:ExplodingPolicy")
