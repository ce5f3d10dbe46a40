"""A user's store factory drives a windowed pipeline through the real broker, and its state comes back
from the changelog after a restart; bad factories are refused with one clear line."""

from __future__ import annotations

import json
import uuid
from collections.abc import Hashable, Iterator
from typing import Any

import pytest
from pydantic import BaseModel

from cadenza.errors import ConfigError
from cadenza.pipelines import Pipeline, Tumbling
from cadenza.settings import KafkaSettings
from cadenza.state import StateStore, store_factory
from cadenza.testing.pytest_plugin import NewTopic
from cadenza.worker import Worker
from cadenza.worker.config import WorkerConfig
from cadenza.worker.parts import WorkerParts
from tests.worker.kafka_io import Reader, produce, running


class DictStore:
    """A dict per partition that counts what it is asked, so the test can tell it was really used."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.tables: dict[int, dict[Hashable, Any]] = {}
        self.calls: dict[str, int] = {}

    def _count(self, what: str) -> None:
        self.calls[what] = self.calls.get(what, 0) + 1

    def get(self, partition: int, key: Hashable) -> Any:
        self._count("get")
        return self.tables.get(partition, {}).get(key)

    def put(self, partition: int, key: Hashable, value: Any) -> None:
        self._count("put")
        self.tables.setdefault(partition, {})[key] = value

    def delete(self, partition: int, key: Hashable) -> None:
        self._count("delete")
        self.tables.get(partition, {}).pop(key, None)

    def items(self, partition: int) -> Iterator[tuple[Any, Any]]:
        self._count("items")
        return iter(list(self.tables.get(partition, {}).items()))

    def size(self, partition: int) -> int:
        return len(self.tables.get(partition, {}))

    def drop(self, partition: int) -> None:
        self.tables.pop(partition, None)

    def close(self) -> None:
        self._count("close")


#: Every store the factory made, in order (the test reads them back).
MADE: list[DictStore] = []


def dict_stores(name: str) -> StateStore:
    store = DictStore(name)
    MADE.append(store)
    return store


def not_a_store(name: str) -> object:
    return {"name": name}


class Ev(BaseModel):
    k: str
    ts: float


def test_a_dict_store_implements_the_protocol() -> None:
    assert isinstance(DictStore("x"), StateStore)


def test_bad_factory_specs_fail_with_one_line_each() -> None:
    cases = {
        "no_such_module_xyz:f": "module 'no_such_module_xyz' not found",
        f"{__name__}:missing": f"module '{__name__}' has no attribute 'missing'",
        f"{__name__}:MADE": "is a list, not callable",
        "nocolon": "unknown state store 'nocolon'",
    }
    for spec, message in cases.items():
        with pytest.raises(ConfigError, match=message) as info:
            store_factory(spec)
        assert "\n" not in str(info.value)
    with pytest.raises(ConfigError, match="returned dict, not a StateStore") as info:
        store_factory(f"{__name__}:not_a_store")("p/1-window")
    assert "\n" not in str(info.value)

    def raises(name: str) -> StateStore:
        raise RuntimeError("disk full")

    with pytest.raises(ConfigError, match="raised for step 'p/1-window': RuntimeError: disk full"):
        store_factory(raises)("p/1-window")


@pytest.mark.kafka
def test_a_user_store_factory_runs_a_window_and_is_restored_from_the_changelog(
    kafka_settings: KafkaSettings, new_topic: NewTopic
) -> None:
    source, out = new_topic(partitions=1), new_topic()
    name = f"userstore-{uuid.uuid4().hex[:6]}"
    pipeline = Pipeline(name, tenant="t", latency_target="250ms")
    pipeline.source(source, value=Ev, key=str, timestamp="ts").window(Tumbling("10s")).count().sink(out)

    def send(rows: list[tuple[str, float]]) -> None:
        produce(
            kafka_settings,
            source,
            [(k.encode(), Ev(k=k, ts=t).model_dump_json().encode(), 0) for k, t in rows],
        )

    def results(reader: Reader) -> list[tuple[str, float, int]]:
        values = [json.loads(r.value or b"") for r in reader.records[out]]
        return sorted((v["key"], v["window_start"], v["value"]) for v in values)

    group = f"g-{name}"
    MADE.clear()
    reader: Reader | None = None
    try:
        # Worker one: the factory as a callable. [0, 10) of "a" closes at ts 25; [20, 30) stays open.
        with running(
            Worker(
                [pipeline],
                kafka_settings,
                WorkerConfig(group=group),
                parts=WorkerParts(state_store=dict_stores),
            )
        ):
            reader = Reader(kafka_settings, [out])
            send([("a", 1), ("a", 2), ("a", 3), ("a", 25)])
            reader.wait_for(lambda got: len(got[out]) >= 1, timeout=30, what="the first window")
        [first] = MADE
        assert first.name == f"{name}/2-count"
        assert first.calls.get("put", 0) >= 4  # every record went through the user's store
        assert first.calls.get("close") == 1
        # Worker two: the same factory by its import path; [20, 30) holds one restored record.
        spec = f"{__name__}:dict_stores"
        with running(Worker([pipeline], kafka_settings, WorkerConfig(group=group, state_store=spec))) as two:
            assert two.counters.restored_keys > 0
            second = MADE[1]
            assert second.size(0) > 0  # the restore wrote into the user's store
            send([("a", 26), ("a", 45)])
            reader.wait_for(lambda got: len(got[out]) >= 2, timeout=30, what="the restored window")
            reader.settle(0.5)
        assert len(MADE) == 2
        assert results(reader) == [("a", 0.0, 3), ("a", 20.0, 2)]
    finally:
        if reader is not None:
            reader.close()
