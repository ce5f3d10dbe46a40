"""A process step through the real broker: its state survives a worker restart through the changelog,
and its wall-clock and event-time timers fire (the event-time ones registered before the restart)."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest

from cadenza import Processor, ProcessorContext, ProcessorRecord
from cadenza.pipelines import Pipeline
from cadenza.settings import KafkaSettings
from cadenza.testing.pytest_plugin import NewTopic
from cadenza.worker import Worker
from cadenza.worker.config import WorkerConfig
from tests.worker.kafka_io import Record, produce, reading, running

pytestmark = pytest.mark.kafka

TIMER_AFTER = 5.0
HEARTBEAT_AFTER = 0.5


def _event_time(value: dict[str, Any]) -> float:
    return float(value["t"])


class CountWithTimers(Processor):
    """Counts records per key; a key's first record sets an event-time timer TIMER_AFTER later (it
    reports the count then) and a wall-clock timer HEARTBEAT_AFTER from now."""

    def init(self, context: ProcessorContext) -> None:
        self.ctx = context

    def process(self, record: ProcessorRecord) -> None:
        ctx = self.ctx
        count = (ctx.state or 0) + 1
        if count == 1:
            ctx.schedule_event_timer(record.timestamp + TIMER_AFTER)
            ctx.schedule_wall_clock_timer(ctx.now() + HEARTBEAT_AFTER)
        ctx.state = count
        ctx.forward({"key": ctx.key, "count": count})

    def on_event_timer(self, key: Any, when: float) -> None:
        self.ctx.forward({"key": key, "timer": when, "count": self.ctx.state})

    def on_wall_clock_timer(self, key: Any, when: float) -> None:
        self.ctx.forward({"key": key, "heartbeat": when})


def _values(records: list[Record]) -> list[dict[str, Any]]:
    return [json.loads(r.value) for r in records if r.value is not None]


def _record(key: str, t: float) -> tuple[bytes, bytes, int]:
    return key.encode(), json.dumps({"t": t}).encode(), 0


def test_state_survives_a_worker_restart_through_the_changelog_and_timers_fire(
    kafka_settings: KafkaSettings, new_topic: NewTopic
) -> None:
    source, out = new_topic(partitions=1), new_topic()
    suffix = uuid.uuid4().hex[:8]
    pipeline = Pipeline(f"proc-{suffix}", tenant="t", latency_target="1s")
    pipeline.source(source, key=str, timestamp=_event_time).process(CountWithTimers).sink(out)
    start = time.time()
    group = f"g-{suffix}"

    with reading(kafka_settings, [out]) as reader:
        with running(Worker([pipeline], kafka_settings, WorkerConfig(group=group))):
            produce(
                kafka_settings,
                source,
                [_record("a", start), _record("b", start + 0.5), _record("a", start + 1)],
            )

            def first_done(records: dict[str, list[Record]]) -> bool:
                values = _values(records[out])
                return (
                    len([v for v in values if "count" in v]) >= 3
                    and len([v for v in values if "heartbeat" in v]) >= 2
                )

            reader.wait_for(first_done, 60, "the counts and both heartbeats from the first worker")
        first = _values(reader.records[out])
        assert [(v["key"], v["count"]) for v in first if "count" in v and "timer" not in v] == [
            ("a", 1),
            ("b", 1),
            ("a", 2),
        ]
        beats = {v["key"]: v["heartbeat"] for v in first if "heartbeat" in v}
        assert sorted(beats) == ["a", "b"]
        assert beats["a"] == pytest.approx(start + HEARTBEAT_AFTER, abs=30)  # from the worker's clock
        assert not [v for v in first if "timer" in v]  # the watermark has not reached them yet

        # A new worker of the group restores the state and the timers from the changelog.
        with running(Worker([pipeline], kafka_settings, WorkerConfig(group=group))):
            produce(kafka_settings, source, [_record("a", start + TIMER_AFTER + 5)])

            def second_done(records: dict[str, list[Record]]) -> bool:
                return len([v for v in _values(records[out]) if "timer" in v]) >= 2

            reader.wait_for(second_done, 60, "the event-time timers after the restart")
            reader.settle(1.0)
        second = _values(reader.records[out])[len(first) :]
    # The count of a continues from the restored state; the restored timers report their key's count.
    assert [(v["key"], v["count"]) for v in second if "timer" not in v and "count" in v] == [("a", 3)]
    timers = sorted((v["key"], v["timer"], v["count"]) for v in second if "timer" in v)
    assert timers == [("a", start + TIMER_AFTER, 3), ("b", start + 0.5 + TIMER_AFTER, 1)]
    # Heartbeats fired once each before the restart, and their timers left the state with them.
    assert not [v for v in second if "heartbeat" in v]
