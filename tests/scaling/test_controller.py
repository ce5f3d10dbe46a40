"""The pool controller under a VirtualClock, and the mapping from parallelism to workers."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from cadenza.scaling import (
    ControllerSettings,
    InstanceRates,
    PoolController,
    RateWindow,
    workers_for,
)
from cadenza.scheduling.clock import VirtualClock

CAPACITY = 100.0  # records per second of useful time one instance of "work" absorbs


def window(cores: float, partitions: int = 8, instances: int = 1) -> RateWindow:
    """A source topic feeding one sub-topology whose DS2 parallelism is exactly ``cores``."""
    return RateWindow(
        operators={"in": 1, "work": instances},
        edges=[("in", "work")],
        rates={
            "in": [InstanceRates(0.0, 0.0)],
            "work": [InstanceRates(CAPACITY, CAPACITY)] * instances,
        },
        partitions={"work": partitions},
        source_rates={"in": cores * CAPACITY},
    )


def settings(**overrides: float) -> ControllerSettings:
    values: dict[str, float] = {
        "min_workers": 1,
        "max_workers": 6,
        "policy_interval_s": 10.0,
        "warmup_s": 30.0,
        "activation_windows": 2,
        "scale_down_windows": 4,
        "utilisation_target": 1.0,
    }
    values.update(overrides)
    return ControllerSettings(**values)  # type: ignore[arg-type]


def run(
    controller: PoolController, clock: VirtualClock, cores: float, times: int, step: float = 10.0
) -> list[str]:
    actions: list[str] = []
    for _ in range(times):
        clock.advance(step)
        actions.append(controller.evaluate(window(cores)).action)
    return actions


def test_windows_in_the_warm_up_are_ignored() -> None:
    clock = VirtualClock(1000.0)
    controller = PoolController(settings(), clock, workers=1)
    assert run(controller, clock, cores=5, times=2) == ["warmup", "warmup"]
    assert controller.workers == 1
    # 30 s after start the warm-up is over: the first evaluation that counts
    assert run(controller, clock, cores=5, times=1) == ["pending"]


def test_at_most_one_evaluation_per_policy_interval() -> None:
    clock = VirtualClock(0.0)
    controller = PoolController(settings(warmup_s=0.0), clock, workers=3)
    assert run(controller, clock, cores=3, times=1) == ["hold"]
    assert run(controller, clock, cores=3, times=3, step=3.0) == ["wait", "wait", "wait"]
    assert run(controller, clock, cores=3, times=1, step=1.0) == ["hold"]


def test_scale_up_needs_activation_windows_and_then_warms_up() -> None:
    clock = VirtualClock(0.0)
    controller = PoolController(settings(warmup_s=0.0), clock, workers=1)
    first = controller.evaluate(window(4))
    assert (first.action, first.proposed, first.desired) == ("pending", 4, 1)
    clock.advance(10)
    second = controller.evaluate(window(4))
    assert (second.action, second.workers, second.desired) == ("scale_up", 1, 4)
    assert controller.workers == 4


def test_warm_up_follows_a_scale_up() -> None:
    clock = VirtualClock(0.0)
    controller = PoolController(settings(warmup_s=25.0), clock, workers=1)
    clock.advance(25)
    assert run(controller, clock, cores=4, times=2) == ["pending", "scale_up"]
    assert run(controller, clock, cores=1, times=2) == ["warmup", "warmup"]
    assert run(controller, clock, cores=1, times=1) == ["pending"]


def test_a_window_at_the_current_size_resets_the_streak() -> None:
    clock = VirtualClock(0.0)
    controller = PoolController(settings(warmup_s=0.0, activation_windows=3), clock, workers=2)
    assert run(controller, clock, cores=3, times=2) == ["pending", "pending"]
    assert run(controller, clock, cores=2, times=1) == ["hold"]
    assert run(controller, clock, cores=3, times=3) == ["pending", "pending", "scale_up"]


def test_scale_down_is_stricter_and_a_direction_change_resets() -> None:
    clock = VirtualClock(0.0)
    controller = PoolController(settings(warmup_s=0.0), clock, workers=4)
    assert run(controller, clock, cores=3, times=3) == ["pending"] * 3
    assert run(controller, clock, cores=5, times=1) == ["pending"]  # now up: the down streak is gone
    assert run(controller, clock, cores=3, times=3) == ["pending"] * 3
    assert controller.workers == 4
    assert run(controller, clock, cores=3, times=1) == ["scale_down"]
    assert controller.workers == 3


def test_the_proposal_that_held_throughout_is_applied() -> None:
    clock = VirtualClock(0.0)
    controller = PoolController(settings(warmup_s=0.0, activation_windows=3), clock, workers=1)
    for cores in (5, 3, 4):
        clock.advance(10)
        last = controller.evaluate(window(cores))
    assert (last.action, last.desired) == ("scale_up", 3)


def test_min_and_max_bound_the_pool() -> None:
    clock = VirtualClock(0.0)
    controller = PoolController(settings(warmup_s=0.0, min_workers=2, max_workers=5), clock, workers=9)
    assert controller.workers == 5
    run(controller, clock, cores=50, times=1)
    assert controller.evaluate(window(50)).action == "wait"
    clock.advance(10)
    assert controller.evaluate(window(50)).proposed == 5
    down = run(controller, clock, cores=0.0, times=4)
    assert down[-1] == "scale_down"
    assert controller.workers == 2


def test_reconfigured_restarts_the_warm_up() -> None:
    clock = VirtualClock(0.0)
    controller = PoolController(settings(warmup_s=20.0), clock, workers=2)
    clock.advance(20)
    controller.reconfigured(1)
    assert controller.workers == 1
    assert run(controller, clock, cores=2, times=1) == ["warmup"]
    assert run(controller, clock, cores=2, times=2) == ["pending", "scale_up"]


def test_a_sub_topology_beyond_its_partitions_is_reported_with_the_fix() -> None:
    clock = VirtualClock(0.0)
    controller = PoolController(settings(warmup_s=0.0, max_workers=16), clock, workers=2)
    clock.advance(10)
    decision = controller.evaluate(window(12, partitions=4))
    assert decision.proposed == 4
    [under] = decision.under_partitioned
    assert (under.sub_topology, under.partitions) == ("work", 4)
    assert "at least 12 partitions" in under.fix
    logged = decision.as_dict()
    assert logged["parallelism"] == {"in": 1, "work": 12}
    assert logged["under_partitioned"] == [under.fix]


def test_settings_refuse_inconsistent_bounds() -> None:
    with pytest.raises(ValidationError, match="MIN_WORKERS"):
        settings(min_workers=5, max_workers=2)
    with pytest.raises(ValidationError, match="SCALE_DOWN_WINDOWS"):
        settings(activation_windows=3, scale_down_windows=2)


def test_workers_for_by_hand() -> None:
    demand = workers_for({"a": 1.5, "b": 2.0}, {"a": 8, "b": 8}, 0.5)
    assert (demand.workers, demand.cores, demand.under_partitioned) == (7, 3.5, ())
    capped = workers_for({"a": 10.0, "b": 1.0}, {"a": 3, "b": 4}, 1.0)
    assert capped.cores == 4.0
    assert capped.workers == 4
    assert [u.sub_topology for u in capped.under_partitioned] == ["a"]
    assert workers_for({"a": 0.0}, {"a": 2}, 0.8).workers == 1


@pytest.mark.parametrize(
    ("parallelism", "partitions", "target", "match"),
    [
        ({"a": 1.0}, {"a": 1}, 0.0, "utilisation_target"),
        ({"a": 1.0}, {}, 0.8, "'a' has no partition count"),
        ({"a": -1.0}, {"a": 1}, 0.8, "'a': parallelism"),
        ({"a": 1.0}, {"a": 0}, 0.8, "'a': partitions"),
        ({}, {}, 0.8, "no sub-topology"),
    ],
)
def test_workers_for_refuses_bad_input(
    parallelism: dict[str, float], partitions: dict[str, int], target: float, match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        workers_for(parallelism, partitions, target)


@given(
    st.dictionaries(
        st.sampled_from("abcde"),
        st.tuples(st.floats(0, 50, allow_nan=False), st.integers(1, 12)),
        min_size=1,
    ),
    st.sampled_from([0.5, 0.7, 0.8, 1.0]),
)
def test_workers_for_is_the_fewest_workers_that_fit(
    subs: dict[str, tuple[float, int]], target: float
) -> None:
    parallelism = {name: p for name, (p, _) in subs.items()}
    partitions = {name: n for name, (_, n) in subs.items()}
    result = workers_for(parallelism, partitions, target).workers
    cores = sum(min(p, n) for p, n in subs.values())
    most = max(partitions.values())
    fitting = [w for w in range(1, most + 1) if w >= cores / target]
    assert result == (fitting[0] if fitting else most)
