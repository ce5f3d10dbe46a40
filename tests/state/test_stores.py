"""The state-store interface, run against both stores; the factory; restore into RocksDB via the broker."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, MutableMapping
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from cadenza.errors import ConfigError
from cadenza.infra.kafka.clients import make_consumer
from cadenza.operators import Count, SessionWindows, WindowedAggregation
from cadenza.settings import KafkaSettings
from cadenza.state import (
    ChangelogView,
    InMemoryStateStore,
    Position,
    StateDecodeError,
    StateStore,
    restore_changelogs,
    store_factory,
)
from cadenza.state.rocksdb_store import RocksDBStateStore
from cadenza.state.safe_codec import UnsupportedValueError
from cadenza.testing.pytest_plugin import NewTopic
from tests.worker.kafka_io import produce


class Item(BaseModel):
    name: str
    price: float


@pytest.fixture(params=["memory", "rocksdb"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StateStore]:
    made = store_factory(request.param, tmp_path / "state")(f"pipe/step-{request.param}")
    yield made
    made.close()


def test_partitions_are_kept_apart_and_one_is_dropped_alone(store: StateStore) -> None:
    store.put(0, "a", 1)
    store.put(1, "a", 2)
    store.put(1, ("b", 2), [1.5, "x"])
    assert store.get(0, "a") == 1
    assert store.get(1, "a") == 2
    assert store.get(1, ("b", 2)) == [1.5, "x"]
    assert store.get(2, "a") is None
    assert sorted(store.items(1), key=repr) == sorted([("a", 2), (("b", 2), [1.5, "x"])], key=repr)
    assert store.size(1) == 2
    store.delete(1, "a")
    store.delete(1, "missing")  # absent keys are not an error
    store.delete(7, "missing")  # nor are absent partitions
    assert store.get(1, "a") is None
    store.drop(1)
    assert store.get(1, ("b", 2)) is None
    assert store.size(1) == 0
    assert list(store.items(1)) == []
    assert store.get(0, "a") == 1


def test_values_come_back_with_their_types(store: StateStore) -> None:
    value = [[0.0, 1.0, (3, "x")], {"k": Item(name="a", price=2.5)}, b"raw", None, True, 2**80]
    store.put(0, ("key", 1.0), value)
    assert store.get(0, ("key", 1.0)) == value
    assert store.get(0, ("key", 2.0)) is None


def test_none_is_not_a_value(store: StateStore) -> None:
    with pytest.raises(ValueError, match="None"):
        store.put(0, "k", None)
    assert store.get(0, "k") is None


def test_rocksdb_refuses_what_cannot_be_changelogged_and_stores_nothing(tmp_path: Path) -> None:
    store = RocksDBStateStore(tmp_path / "s")
    with pytest.raises(UnsupportedValueError, match="set"):
        store.put(0, "k", {1, 2})
    assert store.get(0, "k") is None
    assert store.partitions == []
    store.close()


def test_a_window_aggregation_runs_the_same_on_either_store(store: StateStore) -> None:
    times = [0.0, 0.5, 3.0, 3.25, 10.0, 0.75, 20.0]
    results = []
    states: list[MutableMapping[Any, Any]] = [ChangelogView(store, 3), {}]
    for state in states:
        aggregation: WindowedAggregation[str, object, int, int] = WindowedAggregation(
            SessionWindows(1.0), Count(), 0.0, state=state
        )
        got = []
        for t in times:
            aggregation.add("u", t, None)
            got.extend(aggregation.advance(t - 1.0))
        results.append([(r.key, r.window, r.result) for r in got])
    assert results[0] == results[1]
    assert results[0]  # sessions did close


def test_factory_refuses_unknown_kinds_and_missing_directories(tmp_path: Path) -> None:
    assert isinstance(store_factory()("x"), InMemoryStateStore)
    with pytest.raises(ConfigError, match="unknown state store 'disk'"):
        store_factory("disk")
    with pytest.raises(ConfigError, match="needs a state directory"):
        store_factory("rocksdb")
    a_file = tmp_path / "file"
    a_file.write_text("")
    with pytest.raises(ConfigError, match="not a directory"):
        store_factory("rocksdb", a_file)


def test_rocksdb_stores_of_two_workers_never_share_a_directory_and_close_removes_it(tmp_path: Path) -> None:
    first = store_factory("rocksdb", tmp_path)("p/5-join")
    second = store_factory("rocksdb", tmp_path)("p/5-join")
    assert isinstance(first, RocksDBStateStore)
    assert isinstance(second, RocksDBStateStore)
    assert first.directory != second.directory
    first.put(0, "k", 1)
    second.put(0, "k", 2)
    assert (first.get(0, "k"), second.get(0, "k")) == (1, 2)
    first.close()
    assert not first.directory.exists()
    second.close()


def test_a_reopened_rocksdb_partition_starts_empty_since_only_the_changelog_is_trusted(
    tmp_path: Path,
) -> None:
    store = RocksDBStateStore(tmp_path / "s")
    store.put(0, "stale", 1)
    store._partitions.pop(0).close()  # as if the process had died: files left behind
    assert (tmp_path / "s" / "p0").exists()
    store.put(0, "fresh", 2)
    assert dict(store.items(0)) == {"fresh": 2}
    store.close()


@pytest.mark.kafka
def test_state_restored_from_a_changelog_topic_into_rocksdb_equals_the_state_written(
    kafka_settings: KafkaSettings, new_topic: NewTopic, tmp_path: Path
) -> None:
    changelog = new_topic(partitions=2, configs={"cleanup.policy": "compact"})
    written = RocksDBStateStore(tmp_path / "writer")
    view = ChangelogView(written, 1)
    records: list[tuple[bytes | None, bytes | None, int | None]] = []
    for batch in range(3):
        for i in range(20):
            view[f"k{i % 7}"] = [batch, i, Item(name=f"n{i}", price=i / 4)]
        if batch == 1:
            del view["k3"]
        records.extend((key, value, 1) for key, value in view.drain(Position(offset=(batch + 1) * 20)))
    view["unfinished"] = 1  # written after the last marker: a batch the writer never finished
    records.extend((key, value, 1) for key, value in view.drain(Position(offset=999))[:-1])
    produce(kafka_settings, changelog, [(k, v, p) for k, v, p in records])

    consumer, errors = make_consumer(
        kafka_settings, f"restore-{uuid.uuid4().hex[:6]}", **{"enable.partition.eof": True}
    )
    try:
        replays = restore_changelogs(consumer, errors, [(changelog, 0), (changelog, 1)], timeout=20)
    finally:
        consumer.close()
    assert replays[(changelog, 0)].position is None
    replay = replays[(changelog, 1)]
    assert replay.position == Position(offset=60)
    restored = RocksDBStateStore(tmp_path / "reader")
    ChangelogView(restored, 1).load(replay.entries())
    want = {key: value for key, value in written.items(1) if key != "unfinished"}
    assert dict(restored.items(1)) == want
    assert "k3" in want  # rewritten in the last batch after its tombstone
    assert replay.discarded == 1
    written.close()
    restored.close()


def test_a_corrupt_rocksdb_value_is_a_clear_error(tmp_path: Path) -> None:
    store = RocksDBStateStore(tmp_path / "s")
    store.put(0, "k", 1)
    from cadenza.state import encode_key  # noqa: PLC0415

    store._partitions[0][encode_key("k")] = b"\x80pickle"
    with pytest.raises(StateDecodeError, match="pickled"):
        store.get(0, "k")
    store.close()
