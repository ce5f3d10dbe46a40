"""The fetcher's flow control in isolation: pause and resume decisions and the buffer bound, over
simulated partitions (pure logic, no broker; the worker pausing a real bursting partition is
covered by ``test_scheduling_kafka``)."""

from __future__ import annotations

from functools import partial

from confluent_kafka import TopicPartition
from hypothesis import given, settings
from hypothesis import strategies as st

from cadenza.worker.kafka.fetcher import FlowControl


def is_full(flow: FlowControl) -> bool:
    """Read through a call, so that a type checker does not carry an earlier assertion over."""
    return flow.full


def assignment(count: int, topic: str = "t") -> list[TopicPartition]:
    return [TopicPartition(topic, p) for p in range(count)]


def test_a_partition_at_its_share_is_paused_and_resumed_at_half_of_it() -> None:
    flow = FlowControl(max_buffered=400)
    tps = assignment(4)  # share: half of 400 over 4 partitions = 50
    queued = {0: 50, 1: 10, 2: 0, 3: 49}
    decision = flow.decide(tps, sum(queued.values()), lambda _t, p: queued[p])
    assert flow.share == 50
    assert [tp.partition for tp in decision.pause] == [0] and decision.paused_more
    assert set(flow.paused) == {("t", 0)}
    queued[0] = 26  # drained, but not to half of its share yet
    decision = flow.decide(tps, sum(queued.values()), lambda _t, p: queued[p])
    assert not decision.pause and not decision.resume and not decision.paused_more
    queued[0] = 25
    decision = flow.decide(tps, sum(queued.values()), lambda _t, p: queued[p])
    assert [tp.partition for tp in decision.resume] == [0]
    assert flow.paused == {}


def test_a_full_buffer_pauses_everything_until_it_drained_to_half() -> None:
    flow = FlowControl(max_buffered=100)
    tps = assignment(2)
    decision = flow.decide(tps, 99, lambda _t, _p: 0)  # full (many sub-topologies on one topic, say)
    assert is_full(flow) and decision.paused_more and len(decision.pause) == 2
    assert not flow.decide(tps, 99, lambda _t, _p: 0).paused_more  # one pause counted, not one a step
    assert not flow.decide(tps, 51, lambda _t, _p: 0).resume  # above half: still full
    decision = flow.decide(tps, 50, lambda _t, _p: 0)
    assert not is_full(flow) and len(decision.resume) == 2


def test_producer_backpressure_pauses_everything_whatever_the_buffer() -> None:
    flow = FlowControl(max_buffered=1000)
    tps = assignment(3)
    decision = flow.decide(tps, 0, lambda _t, _p: 0, pressure=True)
    assert is_full(flow) and len(decision.pause) == 3
    decision = flow.decide(tps, 0, lambda _t, _p: 0, pressure=False)  # acknowledged: room again
    assert not is_full(flow) and len(decision.resume) == 3


def test_a_held_topic_stays_paused_however_empty() -> None:
    flow = FlowControl(max_buffered=100)
    tps = [TopicPartition("held", 0), TopicPartition("free", 0)]
    decision = flow.decide(tps, 0, lambda _t, _p: 0, held={"held"})
    assert [tp.topic for tp in decision.pause] == ["held"]
    assert not flow.decide(tps, 0, lambda _t, _p: 0, held={"held"}).resume


def test_room_is_one_partitions_share_and_divided_by_the_fanout() -> None:
    flow = FlowControl(max_buffered=1000, fanout=3)
    flow.decide(assignment(10), 0, lambda _t, _p: 0)  # share 50
    assert flow.room(0) == 50
    assert flow.room(900) == 33  # (1000 - 900) // 3 units per record
    assert flow.room(999) <= 0


def test_forgotten_partitions_are_no_longer_paused() -> None:
    flow = FlowControl(max_buffered=10)
    tps = assignment(2)
    flow.decide(tps, 10, lambda _t, _p: 5)
    flow.forget({("t", 0)})
    assert set(flow.paused) == {("t", 1)}


@settings(max_examples=200, deadline=None)
@given(
    max_buffered=st.integers(10, 300),
    partitions=st.integers(1, 6),
    fanout=st.integers(1, 3),
    steps=st.lists(
        st.tuples(st.lists(st.integers(0, 5), min_size=6, max_size=6), st.integers(0, 100), st.booleans()),
        min_size=1,
        max_size=40,
    ),
)
def test_the_buffer_bound_holds_and_only_flooded_partitions_are_paused(
    max_buffered: int, partitions: int, fanout: int, steps: list[tuple[list[int], int, bool]]
) -> None:
    """Every partition has an endless backlog at the broker; each step the fetcher takes up to its
    room from unpaused partitions (in an order hypothesis picks), the executor drains some units, and
    flow control decides. The buffer never exceeds ``max_buffered``, and outside the pause-everything
    brake a paused partition is one that held its share when it was paused."""
    flow = FlowControl(max_buffered, fanout)
    tps = assignment(partitions)
    queued = [0] * partitions
    for weights, drained, pressure in steps:
        buffered = sum(queued) * fanout
        room = flow.room(buffered)
        take = room if room > 0 else 1  # the fetcher asks for at least one record
        open_ = [p for p in range(partitions) if ("t", p) not in flow.paused]
        # librdkafka's order: some partitions' records first (hypothesis picks how many each).
        for p in open_:
            got = min(take, weights[p] * take)
            queued[p] += got
            take -= got
        assert sum(queued) * fanout <= max_buffered
        for _ in range(drained):  # the executor runs records, the largest queue first
            largest = max(range(partitions), key=lambda p: queued[p])
            if queued[largest]:
                queued[largest] -= 1
        before = set(flow.paused)
        flow.decide(tps, sum(queued) * fanout, lambda _t, p: queued[p] * fanout, pressure=pressure)
        if pressure:
            assert is_full(flow) and set(flow.paused) == {("t", p) for p in range(partitions)}
        elif not flow.full:
            for key in set(flow.paused) - before:
                assert queued[key[1]] * fanout >= flow.share
            for p in range(partitions):
                if ("t", p) not in flow.paused:
                    assert queued[p] * fanout < flow.share
    # Once drained and without pressure, everything flows again.
    flow.decide(tps, 0, lambda _t, _p: 0)
    assert flow.paused == {} and not flow.full


def test_without_shares_only_the_brake_and_held_topics_pause() -> None:
    """One latency target for every topic: no partition is more urgent than another, so none is
    paused at its share (a pause would only throw away what librdkafka prefetched)."""
    flow = FlowControl(max_buffered=400, shares=False)
    tps = [*assignment(3), TopicPartition("held", 0)]
    queued = {0: 190, 1: 0, 2: 0}

    def waiting(topic: str, partition: int) -> int:
        return 0 if topic == "held" else queued[partition]

    decision = flow.decide(tps, 190, waiting, held={"held"})
    assert [(tp.topic, tp.partition) for tp in decision.pause] == [("held", 0)]  # not t/0, far over 50
    decision = flow.decide(tps, 399, waiting, held={"held"})  # the brake still holds the bound
    assert is_full(flow) and set(flow.paused) == {("t", 0), ("t", 1), ("t", 2), ("held", 0)}
    decision = flow.decide(tps, 200, waiting, held={"held"})  # resumed at half, whatever each holds
    assert not is_full(flow)
    assert sorted(tp.partition for tp in decision.resume) == [0, 1, 2]
    assert set(flow.paused) == {("held", 0)}


def count_of(counts: list[int], _topic: str, partition: int) -> int:
    return counts[partition]


def reference_decide(
    state: dict[str, object], tps: list[TopicPartition], max_buffered: int, queued: list[int], held: set[str]
) -> tuple[list[int], list[int]]:
    """The flow control's rule partition by partition (no shortcut): what is paused and resumed."""
    paused: set[int] = state["paused"]  # type: ignore[assignment]
    buffered = sum(queued)
    if buffered >= max_buffered - 1:
        state["full"] = True
        pause = [tp.partition for tp in tps if tp.partition not in paused]
        paused.update(pause)
        return pause, []
    if state["full"]:
        if buffered > max_buffered // 2:
            return [], []
        state["full"] = False
    share = max(1, max_buffered // (2 * len(tps)))
    pause, resume = [], []
    for tp in tps:
        p = tp.partition
        if p in paused:
            if tp.topic not in held and queued[p] <= share // 2:
                resume.append(p)
                paused.discard(p)
        elif tp.topic in held or queued[p] >= share:
            pause.append(p)
            paused.add(p)
    return pause, resume


@given(
    max_buffered=st.integers(4, 200),
    partitions=st.integers(1, 5),
    steps=st.lists(
        st.tuples(st.lists(st.integers(0, 60), min_size=5, max_size=5), st.booleans()),
        min_size=1,
        max_size=30,
    ),
)
def test_decisions_equal_the_rule_applied_to_every_partition(
    max_buffered: int, partitions: int, steps: list[tuple[list[int], bool]]
) -> None:
    """Most rounds skip asking every partition's count (nothing paused, the buffer under a share);
    the decisions are those of the rule applied to each partition, round after round."""
    flow = FlowControl(max_buffered)
    tps = assignment(partitions)
    state: dict[str, object] = {"paused": set(), "full": False}
    for counts, hold in steps:
        queued = counts[:partitions]
        held = {"t"} if hold else set()
        decision = flow.decide(tps, sum(queued), partial(count_of, queued), held)
        pause, resume = reference_decide(state, tps, max_buffered, queued, held)
        assert [tp.partition for tp in decision.pause] == pause
        assert [tp.partition for tp in decision.resume] == resume
        assert {p for _, p in flow.paused} == state["paused"]
        assert flow.full == state["full"]
