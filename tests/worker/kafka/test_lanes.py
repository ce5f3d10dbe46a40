"""Fetch lanes in isolation (pure logic, no broker): which topic goes to which lane, the setting's
forms and errors, and the buffer bound with several consumers each allowed one record beyond the room.
The lanes of a running worker are covered by ``test_lanes_kafka``."""

from __future__ import annotations

import pytest
from confluent_kafka import TopicPartition
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from cadenza.errors import ConfigError
from cadenza.pipelines import Pipeline, Tumbling
from cadenza.settings import KafkaSettings
from cadenza.worker import Worker
from cadenza.worker.config import WorkerConfig
from cadenza.worker.kafka.fetcher import FlowControl
from cadenza.worker.kafka.lanes import (
    BULK_FETCH,
    BULK_MIN_BYTES,
    BULK_WAIT_CAP,
    BULK_WAIT_SHARE,
    LANE_RATIO,
    PRODUCE_LINGER_CAP,
    PRODUCE_LINGER_SHARE,
    URGENT_FETCH,
    Lane,
    joint_targets,
    lane_bounds,
    patient_fetch,
    plan_lanes,
    plan_produce_lanes,
    topic_targets,
)


def test_a_topic_takes_the_tightest_target_of_its_readers() -> None:
    assert topic_targets([("a", 5.0), ("a", 0.3), ("b", 5.0), ("a", 1.0)]) == {"a": 0.3, "b": 5.0}


def test_auto_splits_targets_far_apart_and_keeps_close_ones_together() -> None:
    targets = {"ls": 0.3, "ls2": 0.3 * (LANE_RATIO - 1), "ba": 0.3 * LANE_RATIO * LANE_RATIO}
    lanes = plan_lanes(targets)
    assert [lane.topics for lane in lanes] == [("ls", "ls2"), ("ba",)]
    assert [lane.target for lane in lanes] == [0.3, targets["ba"]]
    # The urgent lane fetches fresh; the last one keeps the bulk prefetch a worker always had and
    # waits patiently at the broker.
    assert lanes[0].fetch == URGENT_FETCH
    assert lanes[1].fetch == {**BULK_FETCH, **patient_fetch(targets["ba"], 0.02)}


def test_alike_targets_make_one_lane_with_the_bulk_settings() -> None:
    lanes = plan_lanes({"a": 1.0, "b": 2.0, "c": 1.0 * LANE_RATIO * 0.99})
    assert len(lanes) == 1 and lanes[0].topics == ("a", "b", "c") and lanes[0].fetch == BULK_FETCH


def test_the_broker_wait_is_the_setting_on_the_first_lane_and_patient_behind_it() -> None:
    targets = {"ls": 0.3, "ba": 0.3 * LANE_RATIO * LANE_RATIO}
    lanes = plan_lanes(targets, "auto", fetch_wait=0.25)
    assert [lane.fetch for lane in lanes] == [
        {**URGENT_FETCH, "fetch.wait.max.ms": 250},
        {**BULK_FETCH, "fetch.wait.max.ms": 250, "fetch.min.bytes": BULK_MIN_BYTES},
    ]
    assert plan_lanes({}, "off", fetch_wait=0.0004)[0].fetch["fetch.wait.max.ms"] == 1  # librdkafka's ms


@pytest.mark.parametrize(
    ("target", "fetch_wait", "wait_ms"),
    [
        (0.2, 0.02, 20),  # 5% of 200 ms is 10 ms: never below the worker's own wait
        (2.0, 0.02, 100),  # 5% of the target
        (10.0, 0.02, 500),  # 5% is exactly the cap
        (60.0, 0.02, 500),  # capped
        (60.0, 0.8, 800),  # a wait set above the cap is kept
        (4.0, 0.3, 300),  # 5% (200 ms) is below the setting: the setting
    ],
)
def test_patient_fetch_waits_a_share_of_the_target_between_the_setting_and_the_cap(
    target: float, fetch_wait: float, wait_ms: int
) -> None:
    assert patient_fetch(target, fetch_wait) == {
        "fetch.wait.max.ms": wait_ms,
        "fetch.min.bytes": BULK_MIN_BYTES,
    }
    expected = min(max(fetch_wait, BULK_WAIT_CAP), max(fetch_wait, target * BULK_WAIT_SHARE))
    assert wait_ms == round(expected * 1000)


def test_only_lanes_behind_the_most_urgent_one_are_patient() -> None:
    targets = {"fast": 0.1, "mid": 2.0, "slow": 60.0}
    lanes = plan_lanes(targets, "500,10000")
    assert [lane.fetch for lane in lanes] == [
        URGENT_FETCH,
        {**URGENT_FETCH, **patient_fetch(2.0, 0.02)},
        {**BULK_FETCH, **patient_fetch(60.0, 0.02)},
    ]
    # One lane is the urgent one, whatever its target: it keeps the worker's wait.
    (only,) = plan_lanes(targets, "off")
    assert only.fetch == BULK_FETCH and "fetch.min.bytes" not in only.fetch


def test_off_is_one_lane_and_bounds_place_topics_below_them() -> None:
    targets = {"fast": 0.1, "mid": 2.0, "slow": 60.0}
    assert [lane.topics for lane in plan_lanes(targets, "off")] == [("fast", "mid", "slow")]
    assert [lane.topics for lane in plan_lanes(targets, "500,10000")] == [("fast",), ("mid",), ("slow",)]
    # A lane no topic falls into is dropped, and indexes stay dense.
    lanes = plan_lanes(targets, "50,1000")
    assert [(lane.index, lane.topics) for lane in lanes] == [(0, ("fast",)), (1, ("mid", "slow"))]


@pytest.mark.parametrize("spec", ["fast", "100,abc", "-5", "1000,500", "0"])
def test_a_bad_lanes_setting_is_a_config_error_naming_the_variable(
    spec: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ValueError):
        lane_bounds(spec)
    with pytest.raises(ConfigError, match="lanes"):
        plan_lanes({"t": 1.0}, spec)
    monkeypatch.setenv("CADENZA_LANES", spec)
    with pytest.raises(ConfigError, match="CADENZA_LANES"):
        WorkerConfig.load()


def test_the_worker_puts_a_repartition_topic_in_the_lane_of_the_pipeline_reading_it() -> None:
    ls = Pipeline("lanes-ls", tenant="LS", latency_target="300ms")
    ls.source("clicks").key_by(lambda v: v).map(lambda v: v).sink("ls-out")
    ba = Pipeline("lanes-ba", tenant="BA", latency_target="5s")
    ba.source("jobs").map(lambda v: v).sink("ba-out")
    settings_ = KafkaSettings(bootstrap_servers="127.0.0.1:1")
    worker = Worker([ls, ba], settings_, WorkerConfig(lanes="auto"))
    assert [set(lane.topics) for lane in worker.layout.lanes] == [
        {"clicks", "lanes-ls.2-key_by.repartition"},
        {"jobs"},
    ]
    assert len(Worker([ls, ba], settings_, WorkerConfig(lanes="off")).layout.lanes) == 1


def test_the_worker_writes_each_pipelines_topics_through_its_lanes_producer() -> None:
    ls = Pipeline("plane-ls", tenant="LS", latency_target="300ms")
    ls.source("clicks").key_by(lambda v: v).window(Tumbling("1s")).count().sink("ls-out")
    ba = Pipeline("plane-ba", tenant="BA", latency_target="5s")
    ba.source("jobs").map(lambda v: v).sink("ba-out")
    settings_ = KafkaSettings(bootstrap_servers="127.0.0.1:1", linger_ms=5)
    worker = Worker([ls, ba], settings_, WorkerConfig(lanes="auto"))
    assert [(lane.name, lane.linger_ms) for lane in worker.layout.produce_lanes] == [
        ("producer", 5),
        ("producer-lane1", round(min(PRODUCE_LINGER_CAP, PRODUCE_LINGER_SHARE * 5.0) * 1000)),
    ]
    urgent, bulk = (set(lane.topics) for lane in worker.layout.produce_lanes)
    # Everything LS writes (its repartition topic and window changelog too) lingers as briefly as ever.
    assert {"ls-out", "plane-ls.dlq", "plane-ls.late", "plane-ls.2-key_by.repartition"} <= urgent
    assert any("changelog" in topic for topic in urgent)
    assert bulk == {"ba-out", "plane-ba.dlq", "plane-ba.late"}
    # One lane (or lanes off): one producer, the worker's linger, for everything.
    off = Worker([ls, ba], settings_, WorkerConfig(lanes="off")).layout.produce_lanes
    assert len(off) == 1 and off[0].linger_ms == 5 and "ba-out" in off[0].topics


def test_a_topic_written_by_pipelines_of_two_lanes_goes_through_the_most_urgent() -> None:
    lanes = [Lane(0, ("a",), 0.3, {}), Lane(1, ("b",), 10.0, {})]
    produce = plan_produce_lanes([("shared", 10.0), ("bulk", 10.0), ("shared", 0.3)], lanes, 5)
    assert [(lane.topics, lane.linger_ms) for lane in produce] == [(("shared",), 5), (("bulk",), 100)]
    # The linger is a share of the bulk target, never below the worker's own, and at most the cap.
    assert (
        plan_produce_lanes([("x", 1.0)], [Lane(0, (), 0.1, {}), Lane(1, (), 1.0, {})], 5)[1].linger_ms == 20
    )
    assert (
        plan_produce_lanes([("x", 1.0)], [Lane(0, (), 0.1, {}), Lane(1, (), 1.0, {})], 50)[1].linger_ms == 50
    )
    # A lane nobody writes through is dropped; the first is always there (the worker's own records).
    assert plan_produce_lanes([("x", 0.3)], lanes, 5) == plan_produce_lanes([("x", 0.3)], lanes[:1], 5)
    assert [lane.topics for lane in plan_produce_lanes([("x", 20.0)], lanes, 5)] == [(), ("x",)]


@settings(max_examples=300, deadline=None)
@given(
    readers=st.lists(st.floats(0.01, 100.0), min_size=1, max_size=5),
    writers=st.lists(st.tuples(st.sampled_from("stuvwxyz"), st.floats(0.01, 100.0)), max_size=12),
    linger_ms=st.integers(1, 60),
)
def test_produce_lanes_against_a_brute_force(
    readers: list[float], writers: list[tuple[str, float]], linger_ms: int
) -> None:
    lanes = plan_lanes({f"in{i}": target for i, target in enumerate(readers)})
    got = plan_produce_lanes(writers, lanes, linger_ms)

    def lane_of(target: float) -> int:  # the last fetch lane not tighter than the writer
        fits = [lane.index for lane in lanes if lane.target <= target]
        return fits[-1] if fits else 0

    expected: dict[int, set[str]] = {0: set()}
    for topic in {topic for topic, _ in writers}:
        index = min(lane_of(target) for t, target in writers if t == topic)
        expected.setdefault(index, set()).add(topic)
    assert {lane.index: set(lane.topics) for lane in got} == expected
    for lane in got:
        tightest = min((target for t, target in writers if t in lane.topics), default=None)
        if lane.index == 0 or tightest is None:
            assert lane.linger_ms == linger_ms
        else:
            share = min(PRODUCE_LINGER_CAP, PRODUCE_LINGER_SHARE * tightest)
            assert lane.linger_ms == max(linger_ms, round(share * 1000))
    # Every written topic has exactly one producer.
    assert sorted(t for lane in got for t in lane.topics) == sorted({t for t, _ in writers})


@settings(max_examples=300, deadline=None)
@given(
    targets=st.dictionaries(st.sampled_from("abcdefg"), st.floats(0.01, 100.0), min_size=1),
    groups=st.lists(st.sets(st.sampled_from("abcdefgh"), max_size=3), max_size=4),
)
def test_topics_read_together_take_the_tightest_target_of_all_they_are_linked_to(
    targets: dict[str, float], groups: list[set[str]]
) -> None:
    got = joint_targets(targets, groups)
    # Brute force: merge every group's topics with everything already merged with any of them.
    parts = [{topic} for topic in targets]
    for group in groups:
        touching = [part for part in parts if part & group]
        if touching:
            parts = [part for part in parts if not part & group] + [set().union(*touching)]
    assert got == {topic: min(targets[t] for t in part) for part in parts for topic in part}
    lanes = plan_lanes(got)
    assert all(len({lane.index for lane in lanes if group & set(lane.topics)}) <= 1 for group in groups)


def test_a_join_keeps_its_inputs_in_one_lane_the_most_urgent_of_theirs() -> None:
    # BA joins "clicks" (read by LS at 300 ms too) with "orders": both must be read by one consumer,
    # or the group's assignor can give partition p of each side to different workers.
    ls = Pipeline("join-lanes-ls", tenant="LS", latency_target="300ms")
    ls.source("clicks", key=str).map(lambda v: v).sink("ls-out")
    ba = Pipeline("join-lanes-ba", tenant="BA", latency_target="10s")
    left = ba.source("clicks", key=str)
    ba.source("jobs").map(lambda v: v).sink("ba-jobs")
    left.join(ba.source("orders", key=str), within="1s").map(lambda v: v).sink("ba-out")
    worker = Worker([ls, ba], KafkaSettings(bootstrap_servers="127.0.0.1:1"), WorkerConfig(lanes="auto"))
    assert [lane.topics for lane in worker.layout.lanes] == [("clicks", "orders"), ("jobs",)]
    assert worker.layout.lanes[0].target == 0.3


@settings(max_examples=200, deadline=None)
@given(
    max_buffered=st.integers(10, 300),
    lanes=st.integers(1, 4),
    fanout=st.integers(1, 3),
    steps=st.lists(st.tuples(st.integers(0, 100), st.booleans()), min_size=1, max_size=40),
)
def test_the_buffer_bound_holds_when_every_lane_takes_a_record_beyond_the_room(
    max_buffered: int, lanes: int, fanout: int, steps: list[tuple[int, bool]]
) -> None:
    """One partition per lane, each with an endless backlog. Each step every unpaused lane takes what
    the room left it, or one record when there is none (a fetch must call every consumer to serve
    its callbacks): the buffer still never exceeds ``max_buffered``."""
    # Every lane must be asked once per fetch (its callbacks), so a buffer smaller than a record per
    # lane and sub-topology cannot be bounded; hypothesis found max_buffered=10, 4 lanes, fanout 3.
    assume(max_buffered >= 2 * lanes * fanout)
    flow = FlowControl(max_buffered, fanout, lanes=lanes)
    tps = [TopicPartition(f"lane{i}", 0) for i in range(lanes)]
    queued = [0] * lanes
    for drained, pressure in steps:
        room = flow.room(sum(queued) * fanout)
        taken = 0
        for i in range(lanes):
            if (f"lane{i}", 0) in flow.paused:
                continue
            got = room - taken if room - taken > 0 else 1
            queued[i] += got
            taken += got
        assert sum(queued) * fanout <= max_buffered
        for _ in range(drained):
            largest = max(range(lanes), key=lambda i: queued[i])
            if queued[largest]:
                queued[largest] -= 1
        flow.decide(tps, sum(queued) * fanout, lambda t, _p: queued[int(t[4:])] * fanout, pressure=pressure)
