"""State stores, the changelog view's coalesced writes, and replay marker by marker (no broker)."""

from __future__ import annotations

import math

import pytest

from cadenza.state import (
    FENCE_KEY,
    POSITION_KEY,
    ChangelogReplay,
    ChangelogView,
    InMemoryStateStore,
    Position,
    StateDecodeError,
    decode_position,
    decode_value,
    encode_key,
    encode_position,
    encode_value,
)


def test_in_memory_store_keeps_partitions_apart_and_drops_one() -> None:
    store = InMemoryStateStore()
    store.put(0, "a", 1)
    store.put(1, "a", 2)
    store.put(1, "b", 3)
    assert store.get(0, "a") == 1
    assert store.get(1, "a") == 2
    assert sorted(store.items(1)) == [("a", 2), ("b", 3)]
    assert store.size(1) == 2
    store.delete(1, "a")
    store.delete(1, "missing")  # absent keys are not an error
    assert store.get(1, "a") is None
    store.drop(1)
    assert store.get(1, "b") is None
    assert store.size(1) == 0
    assert store.partitions == [0]
    with pytest.raises(ValueError, match="None"):
        store.put(0, "x", None)


def test_view_writes_each_changed_key_once_with_its_latest_value_then_the_position() -> None:
    store = InMemoryStateStore()
    view = ChangelogView(store, 3)
    view["a"] = [1]
    view["a"] = [2]
    view["b"] = [9]
    del view["b"]
    changed = view.dirty
    writes = view.drain(Position(offset=42, watermark=7.5, event_times={0: 8.5}))
    assert changed
    assert not view.dirty
    assert writes[-1] == (POSITION_KEY, encode_position(Position(42, 7.5, {0: 8.5})))
    body = dict(writes[:-1])
    assert len(body) == 2
    assert decode_value(body[encode_key("a")] or b"") == [2]
    assert body[encode_key("b")] is None  # a tombstone
    # Nothing changed since: only the position is written.
    assert view.drain(Position(offset=43)) == [(POSITION_KEY, encode_position(Position(43)))]


def test_view_behaves_as_a_mapping_over_its_partition_only() -> None:
    store = InMemoryStateStore()
    store.put(0, "other", 1)
    view = ChangelogView(store, 1)
    view["k"] = "v"
    assert view.get("k") == "v"
    assert view.get("missing", "default") == "default"
    assert list(view) == ["k"]
    assert dict(view.items()) == {"k": "v"}
    assert len(view) == 1
    with pytest.raises(KeyError):
        del view["missing"]
    view.load({"restored": 1})
    assert view["restored"] == 1
    assert [key for key, _ in view.drain(Position(0))] == [encode_key("k"), POSITION_KEY]


def test_replay_applies_writes_up_to_the_last_marker_and_discards_the_unfinished_batch() -> None:
    replay = ChangelogReplay()
    replay.apply(encode_key("a"), encode_value(1))
    replay.apply(encode_key("b"), encode_value(2))
    replay.apply(POSITION_KEY, encode_position(Position(10, 5.0, {0: 6.0}, {0: (99, 1)})))
    replay.apply(encode_key("a"), encode_value(3))
    replay.apply(encode_key("b"), None)
    replay.apply(POSITION_KEY, encode_position(Position(20, 6.0)))
    # A worker died after these writes, before their marker: that batch will run again.
    replay.apply(encode_key("c"), encode_value(4))
    replay.apply(encode_key("a"), None)
    entries = replay.entries()
    assert entries == {"a": 3}
    assert replay.position == Position(20, 6.0)
    assert replay.records == 8
    assert replay.discarded == 2


def test_a_hand_over_fence_carries_its_epoch_and_no_state() -> None:
    replay = ChangelogReplay()
    replay.apply(encode_key("a"), encode_value(1))
    replay.apply(POSITION_KEY, encode_position(Position(3)))
    assert replay.fence == -1
    replay.apply(FENCE_KEY, b"4")
    replay.apply(FENCE_KEY, b"2")  # an older move's fence, compacted out of order: the latest epoch stays
    replay.apply(FENCE_KEY, b"not-an-epoch")
    replay.apply(FENCE_KEY, None)
    assert replay.fence == 4
    assert replay.entries() == {"a": 1}
    assert replay.position == Position(3)


def test_an_undecodable_write_fails_the_replay_only_if_it_is_part_of_the_state() -> None:
    pickled = b"\x80pickle"  # a value written by an old version: refused (no pickle)
    marker = encode_position(Position(1))
    # Overwritten, tombstoned, or in a batch the writer never finished: not part of the state.
    replay = ChangelogReplay()
    for key, value in [
        (encode_key("over"), pickled),
        (encode_key("gone"), pickled),
        (b"\xff", pickled),  # a key with an unknown tag
        (POSITION_KEY, marker),
        (encode_key("over"), encode_value(1)),
        (encode_key("gone"), None),
        (b"\xff", None),
        (POSITION_KEY, marker),
        (encode_key("unfinished"), pickled),
    ]:
        replay.apply(key, value)
    assert replay.entries() == {"over": 1}
    # Still part of the state at the last marker: a clear error, never a silent gap.
    for bad_key, bad_value in [(encode_key("kept"), pickled), (b"\xff", encode_value(1))]:
        replay = ChangelogReplay()
        replay.apply(bad_key, bad_value)
        replay.apply(POSITION_KEY, marker)
        with pytest.raises(StateDecodeError):
            replay.entries()


def test_replay_without_any_marker_restores_nothing() -> None:
    replay = ChangelogReplay()
    replay.apply(encode_key("a"), encode_value(1))
    replay.apply(None, b"foreign record without a key")
    assert replay.entries() == {}
    assert replay.position is None


def test_positions_round_trip_including_infinite_event_times_and_origins() -> None:
    for position in (
        Position(0),
        Position(5, 1.25, {0: 2.25}),
        Position(7, -math.inf, {3: 1.0, 1: -math.inf}, {3: (10, 2), 0: (0, 0)}),
    ):
        assert decode_position(encode_position(position)) == position
    with pytest.raises(StateDecodeError):
        decode_position(b"not json")
    with pytest.raises(StateDecodeError):
        decode_value(b"not a pickle")
