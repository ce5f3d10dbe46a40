"""The load generator's schedule, without a broker: seeded, at the asked rate, bursts keep the mean.

Figures are derived from the parameters (rates, shares, Pareto survival), never hard-coded.
"""

from __future__ import annotations

import importlib.util
import itertools
import math
import random
from pathlib import Path
from types import ModuleType

import pytest

from cadenza.errors import ConfigError
from cadenza.loadgen import HEALTH_PAGE, Bursts, Planned, Stream, schedule

ROOT = Path(__file__).resolve().parents[2]


def example(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{name}", ROOT / "examples" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def take(n: int, planned: object) -> list[Planned]:
    assert hasattr(planned, "__next__")
    return list(itertools.islice(planned, n))  # type: ignore[call-overload]


def test_records_validate_against_the_examples_models() -> None:
    click_model = example("clicks_per_user").Click
    order_model = example("bulk_enrich").Order
    epoch = 1_700_000_000.0
    planned = list(schedule([Stream("clicks", 100), Stream("orders", 10)], epoch=epoch, count=300))
    kinds = {p.topic for p in planned}
    assert kinds == {"clicks", "orders"}
    for item in planned:
        key, value = item.record.encode()
        model = click_model if item.topic == "clicks" else order_model
        parsed = model.model_validate_json(value)
        assert key.decode() == (parsed.user if item.topic == "clicks" else parsed.customer)
        if item.topic == "clicks":
            assert parsed.ts == epoch + item.send_time  # event time is the planned send time


def test_same_seed_same_records_and_another_seed_others() -> None:
    streams = [Stream("clicks", 500), Stream("orders", 50)]
    first = list(schedule(streams, seed=3, count=1000, bursts=Bursts()))
    assert first == list(schedule(streams, seed=3, count=1000, bursts=Bursts()))
    assert first != list(schedule(streams, seed=4, count=1000, bursts=Bursts()))


def test_steady_streams_are_evenly_spaced_and_merged_in_time_order() -> None:
    rates = {"clicks": 400.0, "orders": 30.0}
    duration = 2.5
    planned = list(schedule([Stream(k, r) for k, r in rates.items()], duration=duration))  # type: ignore[arg-type]
    assert [p.send_time for p in planned] == sorted(p.send_time for p in planned)
    assert all(p.send_time < duration for p in planned)
    for topic, rate in rates.items():
        times = [p.send_time for p in planned if p.topic == topic]
        assert times == [i / rate for i in range(math.ceil(duration * rate))]


def test_adding_a_stream_leaves_the_others_records_alone() -> None:
    alone = [p for p in schedule([Stream("clicks", 200)], seed=9, duration=2)]
    together = [p for p in schedule([Stream("clicks", 200), Stream("orders", 20)], seed=9, duration=2)]
    assert [p for p in together if p.topic == "clicks"] == alone


def test_count_and_duration_stop_whichever_comes_first() -> None:
    streams = [Stream("clicks", 100)]
    assert len(list(schedule(streams, count=50, duration=10))) == 50
    assert len(list(schedule(streams, count=5000, duration=1))) == 100


def test_health_share_is_respected_within_binomial_noise() -> None:
    share, n = 0.2, 4000
    planned = list(schedule([Stream("clicks", 1000, health_share=share)], seed=1, count=n))
    health = sum(1 for p in planned if p.record.value["page"] == HEALTH_PAGE)
    assert abs(health - share * n) < 5 * math.sqrt(n * share * (1 - share))


@pytest.mark.parametrize("peak", [4.0, math.inf])
def test_bursts_start_on_the_steady_schedule_and_are_never_late(peak: float) -> None:
    rate = 200.0
    bursts = Bursts(alpha=1.5, mean_seconds=0.5, peak=peak)
    planned = list(schedule([Stream("clicks", rate)], seed=5, bursts=bursts, count=20_000))
    times = [p.send_time for p in planned]
    steady = [i / rate for i in range(len(times))]
    starts = [i for i, (t, s) in enumerate(zip(times, steady, strict=True)) if t == s]
    assert starts[0] == 0 and len(starts) > 10
    # The mean rate is kept exactly at every burst start: n records have gone out by n / rate.
    assert all(times[i] == i / rate for i in starts)
    assert all(t <= s for t, s in zip(times, steady, strict=True))
    # Inside a burst records go out at the peak rate (all at once for an infinite peak).
    for begin, end in itertools.pairwise(starts):
        inside = times[begin:end]
        gaps = [b - a for a, b in itertools.pairwise(inside)]
        assert all(math.isclose(g, 1 / (peak * rate)) for g in gaps) if math.isfinite(peak) else not any(gaps)
    sizes = [b - a for a, b in itertools.pairwise(starts)]
    assert max(sizes) > 4 * sorted(sizes)[len(sizes) // 2], "Pareto sizes should be heavy-tailed"


def test_burst_sizes_follow_the_pareto_survival_function() -> None:
    rate, alpha, mean_seconds = 1000.0, 1.5, 1.0
    bursts = Bursts(alpha=alpha, mean_seconds=mean_seconds, max_seconds=1e9)
    n = 5000
    sizes = list(itertools.islice(bursts.sizes(random.Random(11), rate), n))
    scale = mean_seconds * rate * (alpha - 1) / alpha
    for multiple in (1.5, 3.0, 10.0):
        x = scale * multiple
        expected = (scale / x) ** alpha
        observed = sum(1 for s in sizes if s > x) / n
        assert abs(observed - expected) < 5 * math.sqrt(expected * (1 - expected) / n), (multiple, observed)
    assert min(sizes) >= round(scale) - 1


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: Bursts(alpha=1.0), "alpha"),
        (lambda: Bursts(peak=0.5), "peak"),
        (lambda: Bursts(mean_seconds=0), "mean"),
        (lambda: Stream("clicks", 0), "rate"),
        (lambda: Stream("views", 10), "unknown record kind"),  # type: ignore[arg-type]
        (lambda: Stream("clicks", 10, health_share=1.5), "health share"),
        (lambda: list(schedule([])), "no stream"),
        (lambda: list(schedule([Stream("clicks", 1)], duration=0)), "duration"),
    ],
)
def test_bad_settings_are_refused_with_a_clear_message(build: object, message: str) -> None:
    assert callable(build)
    with pytest.raises(ConfigError, match=message):
        build()
