"""Deadline inputs the worker computes per record: window releases and contexts from a Spark stage.

Pure logic: no broker. A record that moves a partition's watermark past a window's close is what
lets that window's result out, so its deadline must count from that close, not its own window's.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

from confluent_kafka import Message

from cadenza.infra.metrics.prometheus import PrometheusExporter
from cadenza.operators.window_assigners import TumblingWindows
from cadenza.scheduling.context import CONTEXT_HEADER, SchedulingContext, encode_context
from cadenza.scheduling.costs import CostModel
from cadenza.scheduling.policies import CameoPolicy
from cadenza.scheduling.policy import OperatorInfo, SourceRecordInfo
from cadenza.worker.engine.context_stamps import (
    CloseTime,
    KeyByStamper,
    TaskSchedule,
    WindowRelease,
    WindowTiming,
    close_function,
)
from cadenza.worker.engine.unit import Unit

DELAY = 0.05  # allowed lateness + out-of-orderness


def tumbling_close(size: float) -> CloseTime:
    return close_function(TumblingWindows(size), DELAY)


def test_a_record_gets_its_own_windows_close_until_it_passes_the_pending_one() -> None:
    release = WindowRelease(tumbling_close(1.0), DELAY)
    # Window [0, 1) closes at 1.05: records inside it and records of [1, 2) before 1.05 release nothing.
    assert [release(0, t) for t in (0.1, 0.5, 0.9, 1.02)] == [1.05, 1.05, 1.05, 2.05]
    # The first record at or past 1.05 moves the watermark over [0, 1)'s close: it carries that close.
    assert release(0, 1.06) == 1.05
    # After it, [1, 2) is pending: the rest of that window is not urgent on its account.
    assert [release(0, t) for t in (1.1, 1.9, 2.04)] == [2.05, 2.05, 3.05]
    assert release(0, 2.3) == 2.05


def test_releases_are_tracked_per_upstream_partition() -> None:
    # A merged stream's watermark is the minimum over upstream partitions, so each partition's first
    # record past the close may be the one that releases it.
    release = WindowRelease(tumbling_close(1.0), DELAY)
    assert release(0, 0.5) == release(1, 0.6) == 1.05
    assert release(0, 1.2) == 1.05
    assert release(1, 1.1) == 1.05
    assert release(0, 1.3) == release(1, 1.4) == 2.05


def test_an_out_of_order_record_neither_releases_nor_moves_the_pending_close() -> None:
    release = WindowRelease(tumbling_close(1.0), DELAY)
    release(0, 1.5)
    assert release(0, 0.7) == 1.05  # late within lateness: its own (already released) window
    assert release(0, 1.8) == 2.05
    assert release(0, 2.1) == 2.05


def test_under_cameo_a_releasing_record_is_as_urgent_as_its_arrival_and_the_others_wait_for_their_close() -> (
    None
):
    policy = CameoPolicy(CostModel(default_cost=0.0))
    release = WindowRelease(tumbling_close(1.0), DELAY)

    def deadline(arrival: float, event_time: float) -> float:
        ctx = SchedulingContext("p", "t", arrival, 0.3, 0.0, 0.0, 0, 1)
        close = release(0, event_time)
        out = policy.build_ctx_at_operator(ctx, OperatorInfo("p", "count", True, close), None)
        return policy.priority(out, arrival)

    assert deadline(0.2, 0.2) == 1.05 + 0.3  # waits for its window
    assert deadline(1.08, 1.07) == 1.08 + 0.3  # releases [0, 1): due now, not at 2.35
    assert deadline(1.5, 1.5) == 2.05 + 0.3


class _Notices:
    """Stands in for the task's :class:`~cadenza.worker.engine.dead_letter.DeadLetters`: records
    its notices."""

    def __init__(self) -> None:
        self.garbled: list[tuple[Message, Unit, str, bytes]] = []

    def context_garbled(self, message: Message, unit: Unit, node_id: str, raw: bytes) -> None:
        self.garbled.append((message, unit, node_id, raw))


def _schedule(policy: CameoPolicy, *, from_source: bool, trusted: bool = False) -> TaskSchedule:
    """A schedule for a stateless task (the schedule reads its entry, input kind, operators and, for a
    garbled context, its decoder's dead letters)."""
    root = SimpleNamespace(process=lambda *args: None)
    subtopology = SimpleNamespace(entry="enrich", input_kind="source" if from_source else "repartition")
    task = SimpleNamespace(root=root, subtopology=subtopology, decoder=SimpleNamespace(dead=_Notices()))
    source = SimpleNamespace(parameters={"trusted_context": trusted})
    graph = SimpleNamespace(name="p", tenant="t", latency_target_s=2.0, node=lambda node_id: source)
    metrics = PrometheusExporter().operator("t", "p", "enrich")
    return TaskSchedule(0, cast(Any, task), cast(Any, graph), policy, metrics)


def _message(ctx: SchedulingContext | None, raw: bytes | None = None) -> Message:
    header = raw if raw is not None else (None if ctx is None else encode_context(ctx))
    headers: list[tuple[str, str | bytes | None]] | None = (
        None if header is None else [(CONTEXT_HEADER, header)]
    )
    return Message(topic="in", partition=0, offset=7, value=b"{}", headers=headers, timestamp=(1, 1_000_000))


def _unit(message: Message) -> Unit:
    return Unit("p", "enrich", "in", 0, 7, None, None, 0.0, message)


def test_a_context_from_an_earlier_stage_of_the_pipeline_keeps_its_frontier_and_gains_this_path_cost() -> (
    None
):
    costs = CostModel(default_cost=0.0)
    costs.add_pipeline("p", {"enrich": []})
    costs.observe("p", "enrich", 0.25)
    policy = CameoPolicy(costs)
    schedule = _schedule(policy, from_source=True, trusted=True)
    stage_output = SchedulingContext("p", "t", 500.0, 2.0, 0.0, 0.0, 3, 99)  # a Spark stage: no path cost
    ctx = schedule.context(_unit(_message(stage_output)), _message(stage_output), now=1_000.0)
    assert (ctx.frontier_time, ctx.latency_target, ctx.trace_id, ctx.hops) == (500.0, 2.0, 99, 4)
    assert ctx.path_cost == costs.path_cost("p", "enrich") > 0.0
    assert policy.priority(ctx, 0.0) == 500.0 + 2.0 - ctx.path_cost
    assert schedule.metrics.context_rejected == 0


def test_a_context_claiming_this_pipeline_on_an_untrusted_source_is_rejected_and_counted() -> None:
    # Issue 15, finding 6: a producer writing t_F = 0, L = 0 on its own records jumped every queue.
    policy = CameoPolicy(CostModel(default_cost=0.0))
    schedule = _schedule(policy, from_source=True)
    forged = SchedulingContext("p", "t", 0.0, 0.0, 0.0, 0.0, 0, 99)
    ctx = schedule.context(_unit(_message(forged)), _message(forged), now=2_000.0)
    assert (ctx.frontier_time, ctx.latency_target, ctx.hops, ctx.trace_id) == (1_000.0, 2.0, 0, 99)
    assert schedule.metrics.context_rejected == 1


def test_a_context_claiming_another_tenant_is_rejected_even_on_a_trusted_source_or_a_repartition() -> None:
    policy = CameoPolicy(CostModel(default_cost=0.0))
    for from_source, claim in (
        (True, ("p", "other-tenant")),
        (False, ("p", "other-tenant")),
        (False, ("q", "t")),
    ):
        schedule = _schedule(policy, from_source=from_source, trusted=from_source)
        forged = SchedulingContext(*claim, 0.0, 0.0, 0.0, 0.0, 5, 99)
        ctx = schedule.context(_unit(_message(forged)), _message(forged), now=2_000.0)
        assert (ctx.pipeline_id, ctx.tenant_id, ctx.frontier_time, ctx.latency_target) == (
            "p",
            "t",
            1_000.0,
            2.0,
        )
        assert ctx.trace_id == 99
        assert schedule.metrics.context_rejected == 1


def test_another_pipelines_context_starts_a_new_deadline_with_the_same_trace() -> None:
    policy = CameoPolicy(CostModel(default_cost=0.0))
    schedule = _schedule(policy, from_source=True)
    upstream = SchedulingContext("other", "t", 500.0, 9.0, 0.0, 0.0, 3, 99)
    ctx = schedule.context(_unit(_message(upstream)), _message(upstream), now=2_000.0)
    assert (ctx.pipeline_id, ctx.frontier_time, ctx.latency_target, ctx.trace_id) == ("p", 1_000.0, 2.0, 99)


def test_a_garbled_context_is_counted_noticed_and_replaced_by_a_source_context() -> None:
    policy = CameoPolicy(CostModel(default_cost=0.0))
    schedule = _schedule(policy, from_source=False)
    notices = cast(_Notices, schedule.task.decoder.dead)
    message = _message(None, raw=b"\x01garbage")
    unit = _unit(message)
    ctx = schedule.context(unit, message, now=2_000.0)
    assert schedule.metrics.context_garbled == 1
    assert (ctx.pipeline_id, ctx.frontier_time, ctx.hops) == ("p", 1_000.0, 0)
    # The record still runs (it gets a context), and the dead-letter topic gets a notice naming it.
    assert notices.garbled == [(message, unit, "enrich", b"\x01garbage")]


def test_a_valid_or_missing_context_leaves_no_notice() -> None:
    policy = CameoPolicy(CostModel(default_cost=0.0))
    stamped = SchedulingContext("p", "t", 500.0, 2.0, 0.0, 0.0, 1, 7)
    for from_source, ctx in ((False, stamped), (False, None), (True, stamped), (True, None)):
        schedule = _schedule(policy, from_source=from_source)
        message = _message(ctx)
        schedule.context(_unit(message), message, now=2_000.0)
        assert cast(_Notices, schedule.task.decoder.dead).garbled == []
        assert schedule.metrics.context_garbled == 0
        assert schedule.metrics.context_missing == (1 if ctx is None and not from_source else 0)


def _source_message(partition: int, offset: int, millis: int) -> Message:
    return Message(topic="in", partition=partition, offset=offset, value=b"{}", timestamp=(1, millis))


def _source_unit(message: Message) -> Unit:
    partition, offset = message.partition(), message.offset()
    assert partition is not None and offset is not None
    return Unit("p", "enrich", "in", partition, offset, None, None, 0.0, message)


def test_records_admitted_together_with_one_arrival_share_a_context_but_not_a_trace_id() -> None:
    schedule = _schedule(CameoPolicy(CostModel(default_cost=0.0)), from_source=True)
    now = 2_000.0
    units = [_source_unit(_source_message(0, i, 1_000_000)) for i in range(4)]
    contexts = [schedule.context(unit, unit.message, now) for unit in units]
    assert all(ctx is contexts[0] for ctx in contexts)
    assert (contexts[0].frontier_time, contexts[0].latency_target) == (1_000.0, 2.0)
    assert len({unit.trace_id for unit in units}) == 4
    assert units[0].trace_id == contexts[0].trace_id
    # Another partition, another arrival or another admission (the cost model may have learnt since):
    # a context of its own, equal to what one made from scratch would be but for the trace id.
    other = [
        (_source_unit(_source_message(1, 0, 1_000_000)), now),
        (_source_unit(_source_message(0, 4, 1_000_001)), now),
        (_source_unit(_source_message(0, 5, 1_000_001)), now + 1.0),
    ]
    made = [schedule.context(unit, unit.message, at) for unit, at in other]
    assert len({id(ctx) for ctx in [contexts[0], *made]}) == 4
    assert [ctx.frontier_time for ctx in made] == [1_000.0, 1_000.001, 1_000.001]
    assert all(unit.trace_id == ctx.trace_id for (unit, _), ctx in zip(other, made, strict=True))


def test_a_policy_that_does_not_declare_shareable_source_contexts_gets_one_per_record() -> None:
    class PerRecord(CameoPolicy):
        shares_source_contexts = False

    schedule = _schedule(PerRecord(CostModel(default_cost=0.0)), from_source=True)
    units = [_source_unit(_source_message(0, i, 1_000_000)) for i in range(3)]
    contexts = [schedule.context(unit, unit.message, 2_000.0) for unit in units]
    assert len({id(ctx) for ctx in contexts}) == 3
    assert [unit.trace_id for unit in units] == [ctx.trace_id for ctx in contexts]


def test_a_record_with_a_context_header_never_shares() -> None:
    schedule = _schedule(CameoPolicy(CostModel(default_cost=0.0)), from_source=True)
    foreign = SchedulingContext("upstream", "t", 900.0, 1.0, 0.0, 0.0, 2, 77)
    plain = _source_unit(_source_message(0, 0, 1_000_000))
    first = schedule.context(plain, plain.message, 2_000.0)
    headed = _unit(_message(foreign))
    second = schedule.context(headed, headed.message, 2_000.0)
    assert second is not first and headed.trace_id == second.trace_id == 77


def test_a_sink_derives_each_results_header_from_its_run_and_its_own_trace_id() -> None:
    """Header bytes are exactly what encoding each result's context from scratch gives."""
    from cadenza.operators import Window  # noqa: PLC0415
    from cadenza.scheduling.context import decode_context  # noqa: PLC0415
    from cadenza.worker.engine.context_stamps import SinkStamper  # noqa: PLC0415

    metrics = PrometheusExporter().operator("t", "p", "out", sink=True)
    stamp = SinkStamper(latency_target=2.0, delay=0.5, metrics=metrics, emitter=None)
    runs = [SchedulingContext("p", "t", 1_000.0 + r, 2.0, 3.0 + r, 0.25, 1, 10 + r) for r in range(3)]
    expected: list[bytes] = []
    got: list[bytes | None] = []
    for i in range(30):
        ctx = runs[i % 3]  # results of three runs interleave, as quanta of three partitions do
        window = Window(10.0, 20.0) if i % 5 == 0 else None
        unit = _source_unit(_source_message(i % 3, i, 1_000_000))
        unit.ctx = ctx
        unit.trace_id = 1_000 + i
        frontier = 20.5 if window is not None else ctx.frontier_time
        again = SchedulingContext("p", "t", frontier, 2.0, ctx.priority, 0.0, 2, 1_000 + i)
        expected.append(encode_context(again))
        got.append(stamp(unit, window, None))
    assert got == expected
    decoded = [decode_context(raw) for raw in got]
    assert [d.trace_id for d in decoded if d is not None] == [1_000 + i for i in range(30)]
    # The stamp records each result's deadline; the sink counts it as produced once it is produced.
    assert (metrics.deadlines_met + metrics.deadlines_missed, metrics.produced) == (30, 0)


class _Keeper(CameoPolicy):
    """Keeps every info its hooks get (as a policy batching its bookkeeping would)."""

    keeps_hook_info = True

    def __init__(self) -> None:
        super().__init__(CostModel(default_cost=0.0))
        self.sources: list[SourceRecordInfo] = []
        self.operators: list[OperatorInfo] = []

    def build_ctx_at_source(self, record: SourceRecordInfo) -> SchedulingContext:
        self.sources.append(record)
        return super().build_ctx_at_source(record)

    def build_ctx_at_operator(
        self, ctx_in: SchedulingContext, operator: OperatorInfo, output: object
    ) -> SchedulingContext:
        self.operators.append(operator)
        return super().build_ctx_at_operator(ctx_in, operator, output)


def test_a_policy_that_keeps_hook_info_gets_a_fresh_info_per_call() -> None:
    keeper = _Keeper()
    schedule = _schedule(keeper, from_source=True, trusted=True)
    units = [_source_unit(_source_message(0, offset, 1_000_000 + offset)) for offset in range(3)]
    for unit in units:
        schedule.context(unit, unit.message, 2_000.0)
    stage = SchedulingContext("p", "t", 500.0, 2.0, 0.0, 0.0, 3, 99)
    for _ in range(2):
        schedule.context(_unit(_message(stage)), _message(stage), now=2_000.0)
    assert [info.offset for info in keeper.sources] == [0, 1, 2]
    assert [info.arrival_time for info in keeper.sources] == [1_000.0, 1_000.001, 1_000.002]
    stamper = KeyByStamper(keeper, "p", "count", WindowTiming(tumbling_close(1.0), DELAY))
    for event_time in (0.5, 1.5):
        stamper(stage, units[0], event_time, None)
    assert [info.window_close_time for info in keeper.operators[2:]] == [1.05, 1.05]
    assert len({id(info) for info in [*keeper.sources, *keeper.operators]}) == 7


def test_by_default_the_hooks_get_one_reused_info_overwritten_per_call() -> None:
    # What keeps_hook_info defaults to: the allocation saved per record, at the cost of the info
    # being valid during the call only.
    class Reader(_Keeper):
        keeps_hook_info = False
        shares_source_contexts = False

    reader = Reader()
    schedule = _schedule(reader, from_source=True)
    for offset in range(3):
        unit = _source_unit(_source_message(0, offset, 1_000_000))
        schedule.context(unit, unit.message, 2_000.0)
    assert len({id(info) for info in reader.sources}) == 1
    assert reader.sources[0].offset == 2
