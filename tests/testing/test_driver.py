"""PipelineDriver: pipelines run in-process with no broker, checked against brute force."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cadenza.errors import CadenzaError
from cadenza.pipelines import Pipeline, Tumbling
from cadenza.scheduling.clock import VirtualClock
from cadenza.testing import PipelineDriver
from cadenza.worker.engine.memory import partition_for

START = 1_700_000_000.0


def _user(value: dict[str, Any]) -> str:
    return str(value["u"])


def _event_time(value: dict[str, Any]) -> float:
    return float(value["t"])


def windowed(name: str = "counts", *, key_by: bool = True, ooo: str = "0s", lateness: str = "0s") -> Pipeline:
    pipeline = Pipeline(name, tenant="t", latency_target="1s")
    if key_by:
        stream = pipeline.source("events", timestamp=_event_time, max_out_of_orderness=ooo).key_by(_user)
    else:  # keyed by the Kafka record key
        stream = pipeline.source("events", key=str, timestamp=_event_time, max_out_of_orderness=ooo)
    stream.window(Tumbling("1s"), allowed_lateness=lateness).count().sink("counts-out")
    return pipeline


def window_step(driver: PipelineDriver, pipeline: str) -> str:
    return next(n.id for n in driver.graphs[pipeline].nodes if n.kind == "window_aggregate")


def results(driver: PipelineDriver, topic: str = "counts-out") -> Counter[tuple[str, float, float]]:
    return Counter(
        {
            (r.value["key"], r.value["window_start"], r.value["window_end"]): r.value["value"]
            for r in driver.outputs(topic)
        }
    )


def test_map_filter_sink_keeps_order_keys_and_carries_a_context() -> None:
    pipeline = Pipeline("stateless", tenant="t", latency_target="200ms")
    pipeline.source("in").filter(lambda v: v["n"] % 2 == 0).map(lambda v: {"n": v["n"] * 10}).sink("out")
    with PipelineDriver([pipeline], clock=VirtualClock(START)) as driver:
        for n in range(6):
            driver.pipe("in", {"n": n}, key=f"k{n}", headers={"trace": "x"})
            driver.advance(0.5)
        out = driver.outputs("out")
    assert [r.value for r in out] == [{"n": 0}, {"n": 20}, {"n": 40}]
    assert [r.key for r in out] == ["k0", "k2", "k4"]
    # The Kafka timestamp of a result is the clock when it was produced: records 0, 2 and 4 were piped
    # at START, START + 1 and START + 2.
    assert [r.timestamp for r in out] == [START, START + 1.0, START + 2.0]
    for record in out:
        assert record.context is not None
        assert record.context.pipeline_id == "stateless"
        assert record.context.latency_target == pytest.approx(0.2)


def test_a_failing_user_function_is_dead_lettered_and_the_rest_runs() -> None:
    def invert(value: dict[str, Any]) -> dict[str, Any]:
        return {"inv": 1 / value["n"]}

    pipeline = Pipeline("fragile", tenant="t", latency_target="1s")
    pipeline.source("in").map(invert).sink("out")
    with PipelineDriver([pipeline]) as driver:
        for n in (2, 0, 4):
            driver.pipe("in", {"n": n})
        driver.pipe("in", b"{not json")
        out = [r.value for r in driver.outputs("out")]
        dead = driver.dead_letters("fragile")
    assert out == [{"inv": 0.5}, {"inv": 0.25}]
    assert [d.headers["cadenza-error-type"] for d in dead] == [b"ZeroDivisionError", b"ValueError"]
    assert [d.headers["cadenza-operator"] for d in dead] == [b"2-map", b"1-source"]
    assert dead[0].value == {"n": 0}  # the consumed record itself, for replay
    assert dead[0].headers["cadenza-source-offset"] == b"1"
    assert dead[1].raw_value == b"{not json"
    assert dead[1].headers["cadenza-dead-letter-disposition"] == b"not-processed"


def brute_force_single_partition(
    events: list[tuple[str, float]], ooo: float, lateness: float
) -> tuple[Counter[tuple[str, float, float]], list[tuple[str, float]]]:
    """Tumbling 1 s counts over one input in arrival order: a record is late when its window's end
    plus the lateness is at or below the watermark before it (max event time seen minus ``ooo``);
    results are the windows the final watermark closed."""
    watermark = -math.inf
    highest = -math.inf
    counts: Counter[tuple[str, float, float]] = Counter()
    late: list[tuple[str, float]] = []
    for user, t in events:
        start = math.floor(t)
        if start + 1.0 + lateness <= watermark:
            late.append((user, t))
        else:
            counts[(user, float(start), float(start + 1))] += 1
        highest = max(highest, t)
        watermark = max(watermark, highest - ooo)
    closed = Counter({w: n for w, n in counts.items() if w[2] + lateness <= watermark})
    return closed, late


def test_tumbling_count_with_out_of_order_records_and_a_late_one() -> None:
    events = [("a", 10.1), ("b", 10.5), ("a", 11.2), ("a", 10.9), ("b", 12.4), ("a", 10.2), ("a", 13.0)]
    with PipelineDriver([windowed(key_by=False, ooo="500ms", lateness="200ms")]) as driver:
        for user, t in events:
            driver.pipe("events", {"u": user, "t": t}, key=user)
        expected, late = brute_force_single_partition(events, 0.5, 0.2)
        # The source is not re-keyed: the window counts per Kafka key.
        assert results(driver) == expected
        assert [(r.value["u"], r.value["t"]) for r in driver.late("counts")] == late
        assert driver.counters.late == 1
    assert late == [("a", 10.2)]  # 10.9 was within out-of-orderness; 10.2 came after 11 + 0.2 <= 12.4 - 0.5
    assert expected[("a", 10.0, 11.0)] == 2


@settings(max_examples=40, deadline=None)
@given(
    partitions=st.integers(1, 3),
    steps=st.lists(
        st.tuples(st.sampled_from("abcde"), st.floats(0.0, 0.7), st.integers(0, 2)), min_size=1, max_size=40
    ),
)
def test_key_by_repartition_and_window_match_a_brute_force(
    partitions: int, steps: list[tuple[str, float, int]]
) -> None:
    # Event times never go back, so no record can be late; a record far ahead on every source
    # partition at the end moves every watermark input past all the windows before it.
    t = 100.0
    events: list[tuple[str, float, int]] = []
    for user, gap, partition in steps:
        t += gap
        events.append((user, t, partition % partitions))
    with PipelineDriver([windowed()], partitions=partitions, idle_timeout=None) as driver:
        for user, at, partition in events:
            driver.pipe("events", {"u": user, "t": at}, partition=partition)
        for partition in range(partitions):
            driver.pipe("events", {"u": "end", "t": t + 10.0}, partition=partition)
        got = results(driver)
        assert driver.late("counts") == []
        state = driver.state("counts", window_step(driver, "counts"))
    expected = Counter((user, float(math.floor(at)), float(math.floor(at) + 1)) for user, at, _ in events)
    assert got == expected
    assert set(state) == {"end"}  # every other window closed and left the store


def test_repartitioned_records_go_where_the_producer_puts_them() -> None:
    with PipelineDriver([windowed()], partitions=3, idle_timeout=None) as driver:
        for user in "abcdefgh":
            driver.pipe("events", {"u": user, "t": 1.0})
        topic = driver.graphs["counts"].node("2-key_by").repartition_topic
        assert topic is not None
        data = [r for r in driver.outputs(topic) if r.raw_value is not None]
    assert len(data) == 8
    assert all(r.partition == partition_for(r.raw_key, 3) for r in data)
    assert len({r.partition for r in data}) > 1


def test_state_is_a_read_only_view_of_the_open_windows() -> None:
    with PipelineDriver([windowed(key_by=False)]) as driver:
        for user, t in [("a", 5.1), ("a", 5.6), ("b", 5.2)]:
            driver.pipe("events", {"u": user, "t": t}, key=user)
        step = window_step(driver, "counts")
        state = driver.state("counts", step)
        with pytest.raises(TypeError):
            state["a"] = None  # type: ignore[index]
        # [start, end, accumulator] per open window of the key.
        assert [slot[:3] for slot in state["a"][0]] == [[5.0, 6.0, 2]]
        assert [slot[:3] for slot in state["b"][0]] == [[5.0, 6.0, 1]]
        driver.pipe("events", {"u": "a", "t": 7.0}, key="a")
        assert "b" not in driver.state("counts", step)  # closed and emitted
        assert state["b"][0][0][2] == 1  # the earlier view did not change under the test
        with pytest.raises(CadenzaError, match="no stateful step"):
            driver.state("counts", "nope")


def test_an_idle_input_stops_holding_the_window_back_once_the_clock_passes_the_timeout() -> None:
    clock = VirtualClock(START)
    with PipelineDriver([windowed()], clock=clock, partitions=2, idle_timeout=30.0) as driver:
        # Only source partition 0 delivers: partition 1 holds the repartitioned window's watermark.
        driver.pipe("events", {"u": "a", "t": 1.5}, partition=0)
        driver.pipe("events", {"u": "a", "t": 4.0}, partition=0)
        assert driver.outputs("counts-out") == []
        driver.advance(29.0)
        driver.pipe("events", {"u": "a", "t": 4.5}, partition=0)
        assert driver.outputs("counts-out") == []
        driver.advance(1.0)  # 30 s since partition 1 was expected: it times out
        driver.pipe("events", {"u": "a", "t": 4.6}, partition=0)
        assert results(driver) == Counter({("a", 1.0, 2.0): 1})
        assert driver.outputs("counts-out")[0].timestamp == START + 30.0


def test_clear_errors_for_unknown_topics_and_pipelines() -> None:
    with PipelineDriver([windowed()]) as driver:
        with pytest.raises(CadenzaError, match="not a source topic"):
            driver.pipe("nope", {"u": "a"})
        with pytest.raises(CadenzaError, match="no pipeline"):
            driver.late("nope")
        with pytest.raises(CadenzaError, match="not read or written"):
            driver.outputs("nope")


@settings(max_examples=60, deadline=None)
@given(
    events=st.lists(
        st.tuples(st.sampled_from("ab"), st.integers(0, 40).map(lambda n: 10.0 + n / 10)),
        min_size=1,
        max_size=30,
    ),
    ooo=st.sampled_from([0.0, 0.3, 1.0]),
    lateness=st.sampled_from([0.0, 0.5]),
)
def test_out_of_order_counts_and_late_records_match_a_brute_force(
    events: list[tuple[str, float]], ooo: float, lateness: float
) -> None:
    pipeline = windowed(key_by=False, ooo=f"{ooo}s", lateness=f"{lateness}s")
    with PipelineDriver([pipeline]) as driver:
        for user, t in events:
            driver.pipe("events", {"u": user, "t": t}, key=user)
        expected, late = brute_force_single_partition(events, ooo, lateness)
        assert results(driver) == expected
        assert [(r.value["u"], r.value["t"]) for r in driver.late("counts")] == late


def _side(value: dict[str, Any]) -> str:
    return str(value["k"])


def test_a_join_pairs_keys_within_the_interval_and_its_state_can_be_read() -> None:
    pipeline = Pipeline("pairs", tenant="t", latency_target="1s")
    left = pipeline.source("left", timestamp=_event_time).key_by(_side)
    right = pipeline.source("right", timestamp=_event_time).key_by(_side)
    left.join(right, within="1s").sink("pairs-out")
    sent = {
        "left": [("x", 10.0), ("y", 10.5), ("x", 20.0)],
        "right": [("x", 10.8), ("y", 12.0), ("x", 19.5)],
    }
    with PipelineDriver([pipeline], idle_timeout=None) as driver:
        for (lk, lt), (rk, rt) in zip(sent["left"], sent["right"], strict=True):
            driver.pipe("left", {"k": lk, "t": lt})
            driver.pipe("right", {"k": rk, "t": rt})
        got = sorted(
            (tuple(r.value[0].values()), tuple(r.value[1].values())) for r in driver.outputs("pairs-out")
        )
        join = next(n.id for n in driver.graphs["pairs"].nodes if n.kind == "join")
        assert driver.state("pairs", join)  # records within the interval are still held
    expected = sorted(
        ((lk, lt), (rk, rt))
        for lk, lt in sent["left"]
        for rk, rt in sent["right"]
        if lk == rk and abs(lt - rt) <= 1.0
    )
    assert got == expected


def test_a_pipeline_stopped_by_a_failing_step_runs_no_more() -> None:
    def strict(value: dict[str, Any]) -> dict[str, Any]:
        if value["n"] < 0:
            raise ValueError("negative")
        return value

    pipeline = Pipeline("strict", tenant="t", latency_target="1s", on_error="stop")
    pipeline.source("in").map(strict).sink("out")
    with PipelineDriver([pipeline]) as driver:
        for n in (1, -1, 2):
            driver.pipe("in", {"n": n})
        assert [r.value for r in driver.outputs("out")] == [{"n": 1}]
        assert driver.stopped["strict"].offset == 1
