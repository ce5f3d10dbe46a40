"""Migration plans: move-once, validity of each step, and the fewest matching steps, on random maps."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cadenza.scaling import plan
from cadenza.scaling.migration import balanced


def test_nothing_moves_gives_no_steps() -> None:
    owners = {0: "a", 1: "b"}
    for strategy in ("all", "fluid", "matching"):
        assert plan(owners, dict(owners), strategy) == []


def test_scale_out_by_hand() -> None:
    current = {0: "a", 1: "a", 2: "a", 3: "a"}
    target = {0: "a", 1: "b", 2: "a", 3: "b"}
    assert plan(current, target, "all") == [{1: "b", 3: "b"}]
    assert plan(current, target, "fluid") == [{1: "b"}, {3: "b"}]
    # "a" sends two partitions, so no plan with one transfer per worker per step is shorter than 2.
    steps = plan(current, target, "matching")
    assert len(steps) == 2
    assert sorted(p for step in steps for p in step) == [1, 3]


def test_swap_between_two_workers_is_one_matching_step() -> None:
    # a sends to b and b sends to a: each worker sends one and receives one, which is one step.
    assert plan({0: "a", 1: "b"}, {0: "b", 1: "a"}, "matching") == [{0: "b", 1: "a"}]


def test_unknown_strategy_and_mismatched_partitions() -> None:
    with pytest.raises(ValueError, match="unknown migration strategy 'fast'"):
        plan({0: "a"}, {0: "b"}, "fast")
    with pytest.raises(ValueError, match=r"only in current: \[1\], only in target: \[2\]"):
        plan({0: "a", 1: "a"}, {0: "b", 2: "b"}, "all")


_maps = st.integers(0, 40).flatmap(
    lambda n: st.tuples(
        st.lists(st.integers(0, 5), min_size=n, max_size=n),
        st.lists(st.integers(0, 5), min_size=n, max_size=n),
    )
)


def _max_degree(current: dict[int, int], target: dict[int, int]) -> int:
    sends = Counter(current[p] for p in current if current[p] != target[p])
    receives = Counter(target[p] for p in current if current[p] != target[p])
    return max([*sends.values(), *receives.values()], default=0)


@settings(max_examples=500, deadline=None)
@given(_maps, st.sampled_from(["all", "fluid", "matching"]))
def test_random_maps(owners: tuple[list[int], list[int]], strategy: str) -> None:
    current = dict(enumerate(owners[0]))
    target = dict(enumerate(owners[1]))
    steps = plan(current, target, strategy)
    moved = [p for step in steps for p in step]
    # every differing partition exactly once, nothing else, straight to its target owner
    assert Counter(moved) == Counter(p for p in current if current[p] != target[p])
    assert all(new == target[p] for step in steps for p, new in step.items())
    assert all(step for step in steps)
    # replaying the steps reaches the target
    owner = dict(current)
    for step in steps:
        owner.update(step)
    assert owner == target
    if strategy == "all":
        assert len(steps) == (1 if moved else 0)
    elif strategy == "fluid":
        assert all(len(step) == 1 for step in steps)
    else:
        for step in steps:
            senders = [current[p] for p in step]
            receivers = list(step.values())
            assert len(set(senders)) == len(senders)
            assert len(set(receivers)) == len(receivers)
        assert len(steps) == _max_degree(current, target)


_ownerships = st.dictionaries(
    st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 11)), st.integers(0, 5), max_size=30
)


@settings(max_examples=500, deadline=None)
@given(_ownerships, st.integers(1, 5))
def test_balanced_spreads_each_topic_and_moves_the_fewest(
    current: dict[tuple[str, int], int], n: int
) -> None:
    workers = list(range(n))
    target = balanced(current, workers)
    assert target.keys() == current.keys()
    assert set(target.values()) <= set(workers)
    for topic in {t for t, _ in current}:
        partitions = [p for p in current if p[0] == topic]
        held = Counter(target[p] for p in partitions)
        shares = [held.get(w, 0) for w in workers]
        assert max(shares) - min(shares) <= 1, f"topic {topic}: {shares}"
        # Brute force of the fewest moves: a worker keeps at most its share (the first workers get the
        # remainder), and a partition of a worker outside the pool always moves.
        base, extra = divmod(len(partitions), n)
        before = Counter(current[p] for p in partitions)
        kept = sum(min(before.get(w, 0), base + (i < extra)) for i, w in enumerate(workers))
        assert sum(current[p] != target[p] for p in partitions) == len(partitions) - kept


def test_balanced_by_hand_and_without_workers() -> None:
    current = {("big", p): "w1" for p in range(4)} | {("ls", p): "w1" for p in range(4)}
    target = balanced(current, ["w1", "w2"])
    assert [target[("big", p)] for p in range(4)] == ["w1", "w1", "w2", "w2"]
    assert [target[("ls", p)] for p in range(4)] == ["w1", "w1", "w2", "w2"]
    assert balanced(target, ["w1"]) == current
    with pytest.raises(ValueError, match="at least one worker"):
        balanced(current, [])
