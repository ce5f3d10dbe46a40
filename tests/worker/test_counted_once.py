"""Records produced, dead letters and late records are counted once, in their step's series; the
worker's totals are read from those series (issue 18, item 10). No broker: the steps write to an
in-memory output."""

from __future__ import annotations

import functools
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message

from cadenza.infra.metrics.prometheus import PrometheusExporter
from cadenza.operators import Late, Window
from cadenza.worker.engine.counters import WorkerCounters
from cadenza.worker.engine.dead_letter import DeadLetters
from cadenza.worker.engine.operators.routing import KeyByOp, SinkOp
from cadenza.worker.engine.output import Epoch, RecordTooLargeError
from cadenza.worker.engine.unit import Unit
from tests.worker.recording_output import Produced, RecordingOutput


def _unit(offset: int) -> Unit:
    message = Message(topic="in", partition=0, offset=offset, value=b"{}", timestamp=(1, 1_000))
    return Unit("p", "src", "in", 0, offset, "k", {"v": offset}, 1.0, message)


def _router(
    counters: WorkerCounters, exporter: PrometheusExporter | None
) -> tuple[DeadLetters, RecordingOutput]:
    out = RecordingOutput()
    metrics = None if exporter is None else functools.partial(exporter.operator, "t", "p")
    return DeadLetters("p.dlq", "p.late", out.as_output(), counters, pipeline="p", metrics=metrics), out


def _bad_records(dead: DeadLetters) -> None:
    """Two decode failures at the source, three function failures in two steps, two late records."""
    for offset in range(2):
        unit = _unit(offset)
        dead.decode_failed(
            unit.message, "in", 0, offset, node_id="src", error="bad json", error_type="Decode"
        )
    for offset, step in ((2, "enrich"), (3, "enrich"), (4, "count")):
        dead.function_failed(_unit(offset), step, ValueError("boom"))
    for offset in (5, 6):
        dead.late(_unit(offset), "count", Late("k", 0.5, Window(0.0, 1.0)), {"v": offset}, 2.0)


def test_the_workers_totals_are_the_sums_of_the_exported_series() -> None:
    exporter = PrometheusExporter()
    counters = WorkerCounters()
    dead, out = _router(counters, exporter)
    _bad_records(dead)
    assert out.topics == ["p.dlq"] * 5 + ["p.late"] * 2
    series = {ops.labels[2]: ops for ops in exporter.operators()}
    assert series["src"].dead_lettered == {"decode": 2}
    assert series["enrich"].dead_lettered == {"function": 2}
    assert (series["count"].dead_lettered, series["count"].late) == ({"function": 1}, 2)
    totals = (counters.dead_letter_decode, counters.dead_letter_function, counters.late)
    assert totals == (2, 3, 2)
    snapshot = counters.snapshot()
    assert (snapshot["dead_letter_decode"], snapshot["dead_letter_function"], snapshot["late"]) == totals
    rendered = exporter.render().decode()
    assert 'cadenza_records_late_total{operator="count",pipeline="p",tenant="t"} 2.0' in rendered
    assert (
        'cadenza_records_dead_lettered_total{operator="enrich",pipeline="p",reason="function",tenant="t"} 2.0'
        in rendered
    )


def test_a_plan_built_again_over_the_same_series_neither_loses_nor_doubles_counts() -> None:
    # After a rebalance the worker builds its tasks (and their routers) again over the same exporter.
    exporter = PrometheusExporter()
    counters = WorkerCounters()
    first, _ = _router(counters, exporter)
    _bad_records(first)
    again, _ = _router(counters, exporter)
    _bad_records(again)
    assert (counters.dead_letter_decode, counters.dead_letter_function, counters.late) == (4, 6, 4)


def test_without_exported_series_the_router_counts_in_series_of_its_own() -> None:
    counters = WorkerCounters()
    dead, _ = _router(counters, None)
    _bad_records(dead)
    assert (counters.dead_letter_decode, counters.dead_letter_function, counters.late) == (2, 3, 2)
    assert dead.series("count").labels == ("", "p", "count")


class _Producer:
    """Refuses values longer than ``limit`` bytes as librdkafka does (message.max.bytes)."""

    def __init__(self, out: RecordingOutput, limit: int) -> None:
        self.out = out
        self.limit = limit

    def produce(
        self, topic: str, value: bytes, key: bytes | None, partition: int, *, headers: Any, on_delivery: Any
    ) -> None:
        if len(value) > self.limit:
            raise KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))
        self.out.records.append(Produced(topic, value, key, dict(headers or []), partition))


class _WritingOutput(RecordingOutput):
    """What a sink and a key_by write through: the producer (sinks) or ``produce`` (key_by), each
    refusing records over ``limit`` bytes."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit
        self.producer = _Producer(self, limit)
        self.epoch = Epoch(self.as_output())
        self.deliver = self.epoch.delivered

    def producer_for(self, topic: str) -> Any:
        return self.producer

    def produce(self, topic: str, value: bytes | None = None, *args: Any, **kwargs: Any) -> None:
        if len(value or b"") > self.limit:
            raise RecordTooLargeError(f"{topic}: too large")
        super().produce(topic, value, *args, **kwargs)


def _writers(
    counters: WorkerCounters, exporter: PrometheusExporter | None
) -> tuple[SinkOp, KeyByOp, RecordingOutput]:
    out = _WritingOutput(limit=40)
    metrics = None if exporter is None else functools.partial(exporter.operator, "t", "p")
    dead = DeadLetters("p.dlq", "p.late", out.as_output(), counters, pipeline="p", metrics=metrics)
    sink = SinkOp("out", "p.out", "json", output=out.as_output(), dead=dead)
    key_by = KeyByOp("rekey", lambda v: v["v"], "p.rep", output=out.as_output(), dead=dead)
    return sink, key_by, out


def _write(sink: SinkOp, key_by: KeyByOp) -> None:
    """Three results and two repartition records written; one of each refused for its size."""
    for offset in range(4):
        value = {"v": offset} if offset < 3 else {"v": offset, "pad": "x" * 60}
        sink.process(_unit(offset), "k", value, 1.0, None)
    for offset in range(3):
        value = {"v": offset} if offset < 2 else {"v": offset, "pad": "x" * 60}
        key_by.process(_unit(offset), "k", value, 1.0, None)


def test_records_produced_are_counted_once_in_the_writing_steps_series() -> None:
    exporter = PrometheusExporter()
    counters = WorkerCounters()
    sink, key_by, out = _writers(counters, exporter)
    _write(sink, key_by)
    assert out.topics == ["p.out"] * 3 + ["p.dlq"] + ["p.rep"] * 2 + ["p.dlq"]
    series = {ops.labels[2]: ops for ops in exporter.operators()}
    assert (series["out"].produced, series["rekey"].produced) == (3, 2)  # refused records are not
    assert (series["out"].dead_lettered, series["rekey"].dead_lettered) == ({"function": 1}, {"function": 1})
    assert counters.produced == counters.snapshot()["produced"] == 5
    rendered = exporter.render().decode()
    assert 'cadenza_records_produced_total{operator="out",pipeline="p",tenant="t"} 3.0' in rendered
    assert 'cadenza_records_produced_total{operator="rekey",pipeline="p",tenant="t"} 2.0' in rendered
    again_sink, again_key_by, _ = _writers(counters, exporter)  # a plan built again after a rebalance
    _write(again_sink, again_key_by)
    assert counters.produced == 10


def test_without_exported_series_records_produced_are_still_counted() -> None:
    counters = WorkerCounters()
    sink, key_by, _ = _writers(counters, None)
    _write(sink, key_by)
    assert (sink.metrics.labels, sink.metrics.produced, key_by.metrics.produced) == (("", "p", "out"), 3, 2)
    assert counters.produced == 5
