"""Issue 15: user functions failing in random ways never stop a worker, never lose a record.

Hypothesis picks, per record, which step misbehaves (the map, the filter or the key_by) and how:
raising any exception type (``BaseException`` subclasses and ``SystemExit`` included), returning an
object whose truth test, hash, equality or serialization raises, NaN, None, a huge value, or hanging
briefly. The expected fate of each record (a result, dropped by the filter, or one dead letter) is
worked out here from the behaviour alone, and the worker, run through a real broker, must match it
exactly while it keeps running.
"""

from __future__ import annotations

import json
import math
import time
import uuid
from dataclasses import dataclass
from typing import Any, Literal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cadenza import Pipeline
from cadenza.settings import KafkaSettings
from cadenza.testing.pytest_plugin import NewTopic
from cadenza.worker import Worker
from cadenza.worker.config import WorkerConfig
from tests.reliability._support import group, quick
from tests.worker.kafka_io import produce, reading, running

pytestmark = [
    pytest.mark.slow("hypothesis examples, each through a worker and the broker"),
    pytest.mark.kafka,
    pytest.mark.timeout(300),
]

RECORDS = 40
Fate = Literal["out", "dropped", "dead"]


class UserBaseError(BaseException):
    """Not an Exception: what a careless library might raise."""


class UserError(Exception):
    pass


EXCEPTIONS: tuple[type[BaseException], ...] = (
    ValueError,
    KeyError,
    TypeError,
    ZeroDivisionError,
    AssertionError,
    RecursionError,
    MemoryError,
    StopIteration,
    SystemExit,
    GeneratorExit,
    UserError,
    UserBaseError,
)


class Hostile:
    """An object every protocol of which raises: truth test, hash, equality, repr-free serialization."""

    def __bool__(self) -> bool:
        raise ValueError("truth value is ambiguous")

    def __hash__(self) -> int:
        raise TypeError("unhashable")

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("no equality")


@dataclass(frozen=True)
class Behaviour:
    step: Literal["map", "filter", "key_by"]
    kind: str
    exc: type[BaseException] = ValueError

    def fate(self) -> Fate:
        """The brute-force oracle: what must become of a record whose step behaves so."""
        if self.kind == "raise":
            return "dead"
        if self.step == "map":
            return {"nan": "out", "hostile": "dead", "huge_text": "dead", "huge_int": "out", "hang": "out"}[
                self.kind
            ]  # type: ignore[return-value]
        if self.step == "filter":
            return {"hostile": "dead", "none": "dropped", "nan": "out", "hang": "out"}[self.kind]  # type: ignore[return-value]
        return {"hostile": "dead", "none": "out", "nan": "out", "huge_int": "out", "hang": "out"}[self.kind]  # type: ignore[return-value]


KINDS = {
    "map": ["raise", "nan", "hostile", "huge_text", "huge_int", "hang"],
    "filter": ["raise", "hostile", "none", "nan", "hang"],
    "key_by": ["raise", "hostile", "none", "nan", "huge_int", "hang"],
}

behaviours = st.sampled_from(sorted(KINDS)).flatmap(
    lambda step: st.builds(
        Behaviour, st.just(step), st.sampled_from(KINDS[step]), st.sampled_from(EXCEPTIONS)
    )
)


def misbehave(behaviour: Behaviour, value: dict[str, Any]) -> Any:
    kind = behaviour.kind
    if kind == "raise":
        raise behaviour.exc(f"record {value['id']}")
    if kind == "hang":
        time.sleep(0.05)
        return None
    if kind == "hostile":
        return {"id": value["id"], "x": Hostile()} if behaviour.step == "map" else Hostile()
    if kind == "nan":
        return {"id": value["id"], "x": math.nan} if behaviour.step == "map" else math.nan
    if kind == "none":
        return None
    if kind == "huge_text":
        return {"id": value["id"], "x": "a" * 1_100_000}  # over the producer's message.max.bytes
    return {"id": value["id"], "x": 10**400} if behaviour.step == "map" else 10**400  # huge_int


@settings(
    max_examples=6,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(plan=st.dictionaries(st.integers(0, RECORDS - 1), behaviours, max_size=RECORDS // 2))
def test_random_failing_functions_dead_letter_exactly_their_records_and_lose_none(
    kafka_settings: KafkaSettings, new_topic: NewTopic, plan: dict[int, Behaviour]
) -> None:
    settings_ = quick(kafka_settings)
    source, sink = new_topic(partitions=2), new_topic(partitions=2)

    def step(name: str, normal: Any) -> Any:
        def fn(value: dict[str, Any]) -> Any:
            behaviour = plan.get(value["id"])
            if behaviour is None or behaviour.step != name:
                return normal(value)
            out = misbehave(behaviour, value)
            return normal(value) if behaviour.kind == "hang" else out

        return fn

    pipeline = Pipeline(f"prop-{uuid.uuid4().hex[:6]}", tenant="t", latency_target="5s")
    (
        pipeline.source(source)
        .map(step("map", lambda v: {"id": v["id"]}))
        .filter(step("filter", lambda v: True))
        .key_by(step("key_by", lambda v: v["id"] % 3))
        .sink(sink)
    )
    expected = {i: (plan[i].fate() if i in plan else "out") for i in range(RECORDS)}
    dead_topic = f"{pipeline.name}.dlq"
    worker = Worker([pipeline], settings_, WorkerConfig(group=group(), partitions=2))
    with running(worker), reading(settings_, [sink, dead_topic]) as reader:
        produce(settings_, source, [(None, json.dumps({"id": i}).encode(), None) for i in range(RECORDS)])
        want_out = sum(1 for fate in expected.values() if fate == "out")
        want_dead = sum(1 for fate in expected.values() if fate == "dead")
        reader.wait_for(
            lambda got: len(got[sink]) >= want_out and len(got[dead_topic]) >= want_dead,
            timeout=60,
            what=f"{want_out} results and {want_dead} dead letters",
        )
        reader.settle(0.5)
        assert not worker.stopping
    results = sorted(json.loads(r.value or b"")["id"] for r in reader.records[sink])
    letters = sorted(json.loads(r.value or b"")["id"] for r in reader.records[dead_topic])
    assert results == [i for i, fate in expected.items() if fate == "out"]
    assert letters == [i for i, fate in expected.items() if fate == "dead"]
    assert worker.counters.dead_letter_function == len(letters)
