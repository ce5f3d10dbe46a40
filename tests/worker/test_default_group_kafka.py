"""Issue 15, finding 5: two modules started with the default group reading one topic each got half of
its records (the other halves committed by the other worker, and gone). The default group is now
derived from the pipelines, so each worker gets every record."""

from __future__ import annotations

import json
import uuid

import pytest

from cadenza import Pipeline
from cadenza.settings import KafkaSettings
from cadenza.testing.pytest_plugin import NewTopic
from cadenza.worker import Worker
from cadenza.worker.config import WorkerConfig
from cadenza.worker.layout import default_group
from tests.reliability._support import quick
from tests.worker.kafka_io import produce, reading, running

RECORDS = 200


def _pipeline(name: str, source: str, sink: str) -> Pipeline:
    pipeline = Pipeline(name, tenant="t", latency_target="1s")
    pipeline.source(source).map(lambda v: v).sink(sink)
    return pipeline


def test_the_default_group_is_derived_from_the_pipelines_and_differs_between_modules() -> None:
    a, b = _pipeline("a", "in", "out-a"), _pipeline("b", "in", "out-b")
    assert default_group([a.compile()]) == "cadenza-a"
    assert (
        default_group([b.compile(), a.compile()])
        == default_group([a.compile(), b.compile()])
        == "cadenza-a+b"
    )
    many = [_pipeline(f"p{i:03d}-{'x' * 20}", "in", f"o{i}").compile() for i in range(20)]
    assert default_group(many).startswith("cadenza-") and len(default_group(many)) == 8 + 32
    assert default_group(many) != default_group(many[1:])


@pytest.mark.kafka
@pytest.mark.timeout(90)
def test_two_modules_with_the_default_group_each_get_every_record(
    kafka_settings: KafkaSettings, new_topic: NewTopic
) -> None:
    settings = quick(kafka_settings)
    source, out_a, out_b = new_topic(partitions=4), new_topic(partitions=1), new_topic(partitions=1)
    suffix = uuid.uuid4().hex[:6]
    first = Worker([_pipeline(f"a-{suffix}", source, out_a)], settings, WorkerConfig(partitions=4))
    second = Worker([_pipeline(f"b-{suffix}", source, out_b)], settings, WorkerConfig(partitions=4))
    assert first.group != second.group
    with running(first), running(second), reading(settings, [out_a, out_b]) as reader:
        produce(settings, source, [(None, json.dumps({"n": n}).encode(), None) for n in range(RECORDS)])
        reader.wait_for(
            lambda got: len(got[out_a]) >= RECORDS and len(got[out_b]) >= RECORDS, timeout=45, what="all"
        )
    for topic in (out_a, out_b):
        assert sorted(json.loads(r.value or b"")["n"] for r in reader.records[topic]) == list(range(RECORDS))
