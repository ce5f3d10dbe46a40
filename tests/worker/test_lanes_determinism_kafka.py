"""Results do not depend on fetch timing when a worker reads through two fetch lanes: a property test
through the broker.

Two tenants share the input topic ``clicks`` (keyed by the Kafka key, three partitions). LS (200 ms)
sums it in tumbling windows; BA (10 s) joins it with ``orders`` (outer join, co-partitioned) and,
after a ``key_by``, sums it in session windows. So the worker (``lanes=auto``) reads ``clicks`` and
``orders`` in its urgent lane (a join's two topics share one; the LS target is the tighter) and BA's
repartition topic in a patient bulk lane, whose windows close on progress records written by the
urgent lane's sub-topology: the watermark crosses lanes.

One seeded input (per partition of each topic, in order up to the declared out-of-orderness) is
delivered in four ways: as a backlog; with ``clicks`` complete before ``orders`` starts; with the
worker SIGKILLed mid-way and restarted; and with two workers from the third record on (the group
splits the partitions; a join's sides must stay together). Every time, the window results and the
join results must equal a brute force written here (and in ``window_oracle``), and the late and
dead-letter topics must stay empty. Identical duplicates (at-least-once output after a kill) are
allowed.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cadenza.settings import KafkaSettings
from cadenza.testing.pytest_plugin import NewTopic
from tests.operators.window_oracle import Expected, expected_windows
from tests.worker.kafka_io import produce
from tests.worker.test_watermark_determinism_kafka import WorkerRun, broker_scenarios

pytestmark = pytest.mark.kafka

PARTITIONS = 3
OOO = 5
SIZE, GAP, WITHIN = 10, 3, 2
FLUSH_KEY = "~flush"
CLICKS, ORDERS = 0, 1

PIPELINE_MODULE = f'''
"""The pipelines of the two-lane determinism test; topic names come from the environment."""

import os

from pydantic import BaseModel

from cadenza.pipelines import Pipeline, Session, Tumbling


class Event(BaseModel):
    id: int
    key: str
    ts: float
    value: int


def value_of(event: Event) -> float:
    return event.value


def key_of(event: Event) -> str:
    return event.key


def ids(left: Event | None, right: Event | None) -> dict[str, int | None]:
    return {{"l": None if left is None else left.id, "r": None if right is None else right.id}}


env = os.environ
common = dict(late_topic=env["WM_LATE"], dead_letter_topic=env["WM_DLQ"])
source = dict(value=Event, key=str, timestamp="ts", max_out_of_orderness={OOO})

urgent = Pipeline(env["WM_PREFIX"] + "-ls", tenant="LS", latency_target="200ms", **common)
urgent.source(env["WM_CLICKS"], **source).window(Tumbling({SIZE})).sum(value_of).sink(env["WM_OUT_TUMBLING"])

bulk = Pipeline(env["WM_PREFIX"] + "-ba", tenant="BA", latency_target="10s", **common)
clicks = bulk.source(env["WM_CLICKS"], **source)
orders = bulk.source(env["WM_ORDERS"], **source)
clicks.join(orders, within={WITHIN}, how="outer", joiner=ids).sink(env["WM_OUT_JOIN"])
clicks.key_by(key_of).window(Session({GAP})).sum(value_of).sink(env["WM_OUT_SESSION"])
'''

Row = tuple[int, str, int, int]  # id, key, event time, value
Parts = list[list[list[Row]]]  # [topic][partition] -> rows in offset order
Pair = tuple[int | None, int | None]


def make_input(seed: int, per_partition: int) -> Parts:
    """Per topic and partition, rows each less than OOO behind the largest before; a partition's keys
    are its own (as a key-hashing producer would have it), shared by both topics (so they join)."""
    rng = random.Random(seed)
    ident = 0
    topics: Parts = []
    for _ in (CLICKS, ORDERS):
        partitions = []
        for partition in range(PARTITIONS):
            largest = rng.randint(0, 20)
            rows = []
            for _ in range(per_partition):
                t = rng.randint(largest - OOO + 1, largest + 3)
                largest = max(largest, t)
                rows.append((ident, f"p{partition}k{rng.randint(0, 3)}", t, rng.randint(1, 9)))
                ident += 1
            partitions.append(rows)
        topics.append(partitions)
    return topics


def join_brute_force(clicks: list[Row], orders: list[Row]) -> set[Pair]:
    pairs: set[Pair] = set()
    for left in clicks:
        for right in orders:
            if left[1] == right[1] and abs(left[2] - right[2]) <= WITHIN:
                pairs.add((left[0], right[0]))
    matched_left = {left for left, _ in pairs}
    matched_right = {right for _, right in pairs}
    pairs.update((left[0], None) for left in clicks if left[0] not in matched_left)
    pairs.update((None, right[0]) for right in orders if right[0] not in matched_right)
    return pairs


class LanesRun(WorkerRun):
    def __init__(self, settings: KafkaSettings, new_topic: NewTopic, tmp: Path, name: str) -> None:
        self.inputs = [new_topic(partitions=PARTITIONS), new_topic(partitions=PARTITIONS)]
        self.outs = {kind: new_topic() for kind in ("tumbling", "session", "join")}
        env = {
            "WM_CLICKS": self.inputs[CLICKS],
            "WM_ORDERS": self.inputs[ORDERS],
            **{f"WM_OUT_{kind.upper()}": topic for kind, topic in self.outs.items()},
        }
        outputs = list(self.outs.values())
        super().__init__(
            settings, new_topic, tmp, f"lanes-{name}", module=PIPELINE_MODULE, env=env, outputs=outputs
        )

    def send(self, topic: int, partition: int, rows: list[Row]) -> None:
        produce(
            self.settings,
            self.inputs[topic],
            [
                (key.encode(), json.dumps({"id": i, "key": key, "ts": t, "value": v}).encode(), partition)
                for i, key, t, v in rows
            ],
        )

    def send_share(
        self, parts: Parts, start: float, end: float, topics: tuple[int, ...] = (CLICKS, ORDERS)
    ) -> None:
        """Rows ``[start, end)`` (shares of each partition's length) of ``topics``."""
        for topic in topics:
            for partition, rows in enumerate(parts[topic]):
                self.send(topic, partition, rows[round(start * len(rows)) : round(end * len(rows))])

    def found(self) -> dict[str, set[Expected] | set[Pair]]:
        found: dict[str, set[Expected] | set[Pair]] = {}
        for kind in ("tumbling", "session"):
            values = (json.loads(r.value or b"") for r in self.reader.records[self.outs[kind]])
            found[kind] = {
                (v["key"], v["window_start"], v["window_end"], v["value"])
                for v in values
                if v["key"] != FLUSH_KEY
            }
        values = (json.loads(r.value or b"") for r in self.reader.records[self.outs["join"]])
        found["join"] = {(v["l"], v["r"]) for v in values}
        return found

    def wait_results(self, expected: dict[str, set[Expected] | set[Pair]], timeout: float = 120.0) -> None:
        def complete() -> bool:
            found = self.found()
            return all(found[kind] >= want for kind, want in expected.items()) or bool(
                self.reader.records[self.late]
            )

        try:
            self.wait(complete, timeout, "every window and join result")
        except AssertionError as exc:
            found = self.found()
            missing = {kind: sorted(want - found[kind], key=str)[:8] for kind, want in expected.items()}
            # The whole log: which worker restored what, at which offsets, is what explains a gap.
            raise AssertionError(f"timed out; missing: {missing}\n{self.tail(400_000)}") from exc


Scenario = Callable[[LanesRun, Parts, dict[str, set[Expected] | set[Pair]]], None]


def backlog(run: LanesRun, parts: Parts, expected: dict[str, set[Expected] | set[Pair]]) -> None:
    run.send_share(parts, 0.0, 1.0)
    run.start_worker()
    run.wait_results(expected)


def clicks_first(run: LanesRun, parts: Parts, expected: dict[str, set[Expected] | set[Pair]]) -> None:
    run.send_share(parts, 0.0, 1.0, topics=(CLICKS,))
    run.start_worker()
    run.wait(lambda: bool(run.found()["tumbling"]), 60, "the LS windows")
    time.sleep(2.0)  # clicks is done long before orders delivers anything
    run.send_share(parts, 0.0, 1.0, topics=(ORDERS,))
    run.wait_results(expected)


def killed(run: LanesRun, parts: Parts, expected: dict[str, set[Expected] | set[Pair]]) -> None:
    run.send_share(parts, 0.0, 0.5)
    first = run.start_worker()
    run.wait(lambda: any(run.found().values()), 60, "the first results")
    time.sleep(1.0)  # a few commits (and their changelog writes) before the kill
    run.kill(first)
    run.send_share(parts, 0.5, 1.0)
    run.start_worker()
    run.wait_results(expected)
    assert "restored" in run.log.read_text(), "the restarted worker should have restored state"


def two_workers(run: LanesRun, parts: Parts, expected: dict[str, set[Expected] | set[Pair]]) -> None:
    run.send_share(parts, 0.0, 1 / 3)
    run.start_worker()
    run.wait(lambda: any(run.found().values()), 60, "the first results")
    run.start_worker()
    run.send_share(parts, 1 / 3, 2 / 3)
    time.sleep(3.0)  # the second worker joins the group meanwhile
    run.send_share(parts, 2 / 3, 1.0)
    run.wait_results(expected)


SCENARIOS: dict[str, Scenario] = {
    "backlog": backlog,
    "clicks-first": clicks_first,
    "killed": killed,
    "two-workers": two_workers,
}


# One test per delivery, so that they run side by side under xdist (each draws its own input).
@pytest.mark.slow("worker processes through two lanes, with kills, restarts and a second worker joining")
@pytest.mark.parametrize("name", list(SCENARIOS))
@broker_scenarios(1)
@given(seed=st.integers(0, 2**31), per_partition=st.integers(40, 100))
def test_results_through_two_lanes_are_the_same_whatever_the_fetch_timing(
    *,
    kafka_settings: KafkaSettings,
    new_topic: NewTopic,
    tmp_path_factory: pytest.TempPathFactory,
    name: str,
    seed: int,
    per_partition: int,
) -> None:
    data = make_input(seed, per_partition)
    flush_at = max(t for topic in data for rows in topic for _, _, t, _ in rows) + 1000
    parts: Parts = [
        [[*rows, (10_000 + 10 * topic + p, FLUSH_KEY, flush_at, 1)] for p, rows in enumerate(data[topic])]
        for topic in (CLICKS, ORDERS)
    ]
    clicks = [row for rows in data[CLICKS] for row in rows]
    orders = [row for rows in data[ORDERS] for row in rows]
    watermark = float(flush_at - OOO)
    on_keys = [(key, t, value) for _, key, t, value in clicks]
    # The flush records of a partition match each other: their pairs are expected too.
    flushes = {(10_000 + p, 10_010 + p) for p in range(PARTITIONS)}
    expected: dict[str, set[Expected] | set[Pair]] = {
        "tumbling": expected_windows("tumbling", on_keys, size=SIZE, watermark=watermark),
        "session": expected_windows("session", on_keys, size=SIZE, gap=GAP, watermark=watermark),
        "join": join_brute_force(clicks, orders) | flushes,
    }
    run = LanesRun(kafka_settings, new_topic, tmp_path_factory.mktemp("lanes"), name)
    run.deliver(name, lambda: SCENARIOS[name](run, parts, expected))
    assert "lane1" in run.log.read_text(), f"{name}: the worker should read through two lanes"
    found = run.found()
    for kind, want in expected.items():
        wrong, missing = found[kind] - want, want - found[kind]
        assert not wrong and not missing, (
            f"{name}, {kind} (seed {seed}): wrong {sorted(wrong, key=str)[:5]}, "
            f"missing {sorted(missing, key=str)[:5]}"
        )
