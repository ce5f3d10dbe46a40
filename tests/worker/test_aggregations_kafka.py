"""Aggregations other than count through the real broker equal a brute-force computation.

``mean()`` over hopping windows, ``min()`` over tumbling windows and a user ``aggregate(init, add,
merge)`` over tumbling windows run in one worker on the same generated readings: jittered (out of
order) event times, some records seconds late. Structure as in ``test_windows_kafka``: one source
partition, so the order records reach the windows is the order they were produced in and lateness is
deterministic. Every expected value is computed the plain way, by scanning the readings, never with
cadenza's operators or aggregation functions.
"""

from __future__ import annotations

import json
import math
import random
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from pydantic import BaseModel

from cadenza.pipelines import Hopping, Pipeline, Tumbling
from cadenza.pipelines.stream import WindowedStream
from cadenza.settings import KafkaSettings
from cadenza.testing.pytest_plugin import NewTopic
from cadenza.worker import Worker
from cadenza.worker.config import WorkerConfig
from cadenza.worker.engine.dead_letter import WINDOW_END_HEADER, WINDOW_START_HEADER
from tests.worker.kafka_io import Record, produce, reading, running

pytestmark = pytest.mark.kafka

OUT_OF_ORDERNESS = 1.0
LATENESS = 1.0
FLUSH_SENSOR = "~flush"

Sample = tuple[str, float, float]
"""(sensor, event time, value) of one generated reading."""
WindowKey = tuple[str, float, float]
Windows = Callable[[float], list[tuple[float, float]]]


class Reading(BaseModel):
    sensor: str
    value: float
    ts: float


def tumbling(size: float) -> Windows:
    return lambda ts: [(math.floor(ts / size) * size, math.floor(ts / size) * size + size)]


def hopping(size: float, hop: float) -> Windows:
    """Every ``[k * hop, k * hop + size)`` holding ``ts``, found by trying each ``k`` near it."""
    return lambda ts: [
        (k * hop, k * hop + size)
        for k in range(math.floor((ts - size) / hop) - 1, math.floor(ts / hop) + 2)
        if k * hop <= ts < k * hop + size
    ]


def on_time_values(
    readings: list[Sample], windows_of: Windows
) -> tuple[dict[WindowKey, list[float]], Counter[WindowKey]]:
    """Per (sensor, window) that closes, the values of its on-time readings in arrival order; and the
    (sensor, window) pairs of late readings. A reading is late for a window when window end +
    lateness <= the watermark before it; the watermark is the largest event time so far minus the
    out-of-orderness."""
    values: dict[WindowKey, list[float]] = {}
    late: Counter[WindowKey] = Counter()
    watermark = newest = -math.inf
    for sensor, ts, value in readings:
        for start, end in windows_of(ts):
            if end + LATENESS <= watermark:
                late[(sensor, start, end)] += 1
            else:
                values.setdefault((sensor, start, end), []).append(value)
        newest = max(newest, ts)
        watermark = max(watermark, newest - OUT_OF_ORDERNESS)
    closed = {key: found for key, found in values.items() if key[2] + LATENESS <= watermark}
    return closed, late


def make_readings(seed: int) -> list[Sample]:
    """Mostly increasing times with jitter, some readings seconds late, values of both signs."""
    rng = random.Random(seed)
    readings: list[Sample] = []
    for i in range(400):
        base = i * 0.25
        if i % 29 == 3:
            ts = max(0.0, base - rng.choice([3.0, 4.5, 6.0]))  # late by seconds
        else:
            ts = max(0.0, base + rng.choice([-1.0, -0.5, -0.25, 0.0, 0.0, 0.25, 0.5]))
        readings.append((f"s{rng.randrange(4)}", ts, round(rng.uniform(-100.0, 100.0), 3)))
    return readings


def encode(sensor: str, ts: float, value: float) -> bytes:
    return json.dumps({"sensor": sensor, "value": value, "ts": ts}).encode()


# The user reducer: [count, smallest, largest] of the values. Module-level, as a user would write it.
def spread_init() -> list[Any]:
    return [0, None, None]


def spread_add(acc: list[Any], reading: Reading) -> list[Any]:
    count, low, high = acc
    v = reading.value
    return [count + 1, v if low is None else min(low, v), v if high is None else max(high, v)]


def spread_merge(left: list[Any], right: list[Any]) -> list[Any]:
    if not left[0]:
        return right
    if not right[0]:
        return left
    return [left[0] + right[0], min(left[1], right[1]), max(left[2], right[2])]


def emitted(records: list[Record]) -> dict[WindowKey, Any]:
    """Window results by (sensor, window); asserts each window is emitted once (a clean run)."""
    found: dict[WindowKey, Any] = {}
    for record in records:
        value = json.loads(record.value or b"")
        assert record.key == value["key"].encode()
        key = (value["key"], value["window_start"], value["window_end"])
        assert key not in found, f"window {key} emitted twice"
        found[key] = value["value"]
    return found


def lates(records: list[Record]) -> Counter[WindowKey]:
    return Counter(
        ((r.key or b"").decode(), float(r.header(WINDOW_START_HEADER)), float(r.header(WINDOW_END_HEADER)))
        for r in records
    )


def test_mean_min_and_a_user_aggregate_match_brute_force_with_out_of_order_and_late_records(
    kafka_settings: KafkaSettings, new_topic: NewTopic
) -> None:
    source = new_topic(partitions=1)
    suffix = uuid.uuid4().hex[:6]

    def declare(
        name: str, spec: Tumbling | Hopping, aggregate: Callable[[WindowedStream[Reading]], Any]
    ) -> tuple[Pipeline, str, str]:
        sink = new_topic()
        pipeline = Pipeline(f"{name}-{suffix}", tenant="sensors", latency_target="250ms")
        windowed = (
            pipeline.source(source, value=Reading, timestamp="ts", max_out_of_orderness=OUT_OF_ORDERNESS)
            .key_by(lambda r: r.sensor)
            .window(spec, allowed_lateness=LATENESS)
        )
        aggregate(windowed).sink(sink)
        return pipeline, sink, f"{name}-{suffix}.late"

    mean, mean_out, mean_late = declare("mean", Hopping("4s", "2s"), lambda w: w.mean(lambda r: r.value))
    low, low_out, low_late = declare("min", Tumbling("2s"), lambda w: w.min(lambda r: r.value))
    spread, spread_out, spread_late = declare(
        "spread", Tumbling("3s"), lambda w: w.aggregate(spread_init, spread_add, spread_merge)
    )

    readings = make_readings(seed=5)
    seen = [*readings, (FLUSH_SENSOR, 10_000.0, 0.0)]  # far ahead: closes every other window
    mean_values, mean_lates = on_time_values(seen, hopping(4.0, 2.0))
    low_values, low_lates = on_time_values(seen, tumbling(2.0))
    spread_values, spread_lates = on_time_values(seen, tumbling(3.0))
    assert mean_lates and low_lates and spread_lates  # the input does exercise lateness
    assert any(ts < max(t for _, t, _ in readings[:i]) for i, (_, ts, _) in enumerate(readings) if i)
    want_mean = {k: sum(v) / len(v) for k, v in mean_values.items()}
    want_min = {k: min(v) for k, v in low_values.items()}
    want_spread = {k: [len(v), min(v), max(v)] for k, v in spread_values.items()}
    # Lateness matters to the results: counting late readings in would change some minimum.
    naive_min = {
        (s, start, end): min(x for sensor, ts, x in readings if sensor == s and start <= ts < end)
        for s, start, end in want_min
    }
    assert naive_min != want_min

    produce(kafka_settings, source, [(None, encode(*r), 0) for r in seen])
    worker = Worker([mean, low, spread], kafka_settings, WorkerConfig(group=f"g-{suffix}"))
    topics = [mean_out, low_out, spread_out, mean_late, low_late, spread_late]
    with running(worker), reading(kafka_settings, topics) as reader:
        reader.wait_for(
            lambda got: (
                len(got[mean_out]) >= len(want_mean)
                and len(got[low_out]) >= len(want_min)
                and len(got[spread_out]) >= len(want_spread)
                and len(got[mean_late]) >= sum(mean_lates.values())
                and len(got[low_late]) >= sum(low_lates.values())
                and len(got[spread_late]) >= sum(spread_lates.values())
            ),
            timeout=40,
            what="every mean, min and user-aggregate result and late record",
        )
        reader.settle(1.0)

    got_mean = emitted(reader.records[mean_out])
    assert set(got_mean) == set(want_mean)
    for key, want in want_mean.items():
        assert math.isclose(got_mean[key], want, rel_tol=1e-9, abs_tol=1e-9), (key, got_mean[key], want)
    assert emitted(reader.records[low_out]) == want_min
    assert emitted(reader.records[spread_out]) == want_spread
    assert lates(reader.records[mean_late]) == mean_lates
    assert lates(reader.records[low_late]) == low_lates
    assert lates(reader.records[spread_late]) == spread_lates
    assert worker.counters.window_results == len(want_mean) + len(want_min) + len(want_spread)
