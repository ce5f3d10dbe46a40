"""``cadenza pool``'s loop through the real broker: worker processes, DS2 decisions, published and applied."""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from pathlib import Path

import pytest

from cadenza.feedback.records import KIND_HEADER
from cadenza.infra.kafka.clients import make_producer
from cadenza.pipelines import load_pipelines
from cadenza.scaling.controller import ControllerSettings, PoolController
from cadenza.scaling.observe import dataflow
from cadenza.scaling.pool import POOL_DECISION_KIND, Pool, WorkerProcesses, wait_processes
from cadenza.scheduling.clock import SystemClock
from cadenza.settings import KafkaSettings
from cadenza.testing.pytest_plugin import NewTopic
from cadenza.worker.engine.topology import split
from tests.worker.kafka_io import reading

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]

SLEEP_S = 0.01  # the simulated enrichment call: ~100 records per second of useful time per worker
RATE = 150.0  # records per second in: more than one worker can take, less than two


MODULE = """
import time
from pydantic import BaseModel
from cadenza.pipelines import Pipeline

class Item(BaseModel):
    id: int

def enrich(item: Item) -> int:
    time.sleep({sleep})
    return item.id

pipeline = Pipeline("{name}", tenant="t", latency_target="5s")
pipeline.source("{source}", value=Item).map(enrich).sink("{sink}")
"""


def test_the_pool_scales_out_from_measured_rates_and_publishes_its_decisions(
    kafka_settings: KafkaSettings, new_topic: NewTopic, tmp_path: Path
) -> None:
    source, sink, feedback = new_topic(partitions=4), new_topic(partitions=4), new_topic(partitions=1)
    name = f"pool-{uuid.uuid4().hex[:6]}"
    module = tmp_path / "slow_pipeline.py"
    module.write_text(MODULE.format(sleep=SLEEP_S, name=name, source=source, sink=sink))
    graphs = [p.compile() for p in load_pipelines(module)]
    flow = dataflow((g.name, split(g)) for g in graphs)
    interval = 2.0
    settings = ControllerSettings(
        min_workers=1,
        max_workers=3,
        policy_interval_s=interval,
        warmup_s=4.0,
        activation_windows=2,
        scale_down_windows=6,
        utilisation_target=0.8,
    )
    clock = SystemClock()
    controller = PoolController(settings, clock, workers=1)
    group = f"g-{uuid.uuid4().hex[:8]}"
    processes = WorkerProcesses(
        [str(module), "--group", group],
        env={
            **os.environ,
            "CADENZA_BOOTSTRAP_SERVERS": kafka_settings.bootstrap_servers,
            "CADENZA_RATE_WINDOW_S": str(interval),
        },
    )
    pool = Pool(
        kafka_settings,
        group,
        flow,
        controller,
        processes,
        clock=clock,
        interval_s=interval,
        feedback_topic=feedback,
    )
    stop = threading.Event()

    def load() -> None:
        producer, _ = make_producer(kafka_settings)
        sent = 0
        started = time.monotonic()
        while not stop.is_set():
            due = int((time.monotonic() - started) * RATE)
            for i in range(sent, due):
                producer.produce(source, json.dumps({"id": i}).encode(), str(i).encode())
            sent = max(sent, due)
            producer.poll(0)
            time.sleep(0.02)
        producer.flush(10)

    loader = threading.Thread(target=load, daemon=True)
    try:
        with reading(kafka_settings, [feedback]) as reader:
            processes.scale_to(1)
            controller.reconfigured(1)
            loader.start()
            deadline = time.monotonic() + 120
            while controller.workers < 2 and time.monotonic() < deadline:
                time.sleep(interval)
                pool.step()
            scaled = [d for d in pool.decisions if d.action == "scale_up"]
            assert scaled, [d.as_dict() for d in pool.decisions]
            assert len(processes) == controller.workers == scaled[0].desired >= 2
            sub = next(iter(flow.sub_topologies))
            assert scaled[0].parallelism[sub] >= 2  # 150 records/s at ~100 per busy second
            scraped = pool.exporter.render().decode()
            assert f"cadenza_pool_desired_workers {float(controller.workers)}" in scraped
            assert f"cadenza_pool_workers {float(len(processes))}" in scraped
            reader.wait_for(
                lambda got: len(got[feedback]) >= len(pool.decisions), timeout=30, what="every decision"
            )
        published = reader.records[feedback]
        assert all(r.headers.get(KIND_HEADER) == POOL_DECISION_KIND for r in published)
        bodies = [json.loads(r.value or b"{}") for r in published]
        assert [b["action"] for b in bodies] == [d.action for d in pool.decisions]
        assert bodies[-1]["desired"] == pool.decisions[-1].desired
        assert all(b["group"] == group and source in b["arrival_rates"] for b in bodies)
        # the true rates the decision came from travel with it
        assert all(b["rates"][sub][0]["true_processing"] > 0 for b in bodies)
        wait_processes(processes, timeout=60)  # every worker up (signal handlers set) before the stop
    finally:
        stop.set()
        popens = [p.popen for p in processes.processes]
        processes.stop_all()
    assert [p.returncode for p in popens] == [0] * len(popens)  # SIGTERM: clean stops


COUNTING = """
from pydantic import BaseModel
from cadenza.pipelines import Pipeline, Tumbling

class Item(BaseModel):
    key: str
    ts: float

pipeline = Pipeline("{name}", tenant="t", latency_target="5s")
(
    pipeline.source("{source}", value=Item, key=str, timestamp="ts", max_out_of_orderness=10_000.0)
    .window(Tumbling("1s"))
    .count()
    .sink("{sink}")
)
"""


def test_a_plan_pool_moves_partitions_warm_when_it_scales_and_counts_stay_exact(
    kafka_settings: KafkaSettings, new_topic: NewTopic, tmp_path: Path
) -> None:
    source, sink = new_topic(partitions=4), new_topic(partitions=1)
    name = f"plan-pool-{uuid.uuid4().hex[:6]}"
    module = tmp_path / "counting_pipeline.py"
    module.write_text(COUNTING.format(name=name, source=source, sink=sink))
    graphs = [p.compile() for p in load_pipelines(module)]
    flow = dataflow((g.name, split(g)) for g in graphs)
    group = f"g-{uuid.uuid4().hex[:8]}"
    processes = WorkerProcesses(
        [str(module), "--group", group],
        env={**os.environ, "CADENZA_BOOTSTRAP_SERVERS": kafka_settings.bootstrap_servers},
        ownership_plan=True,
    )
    clock = SystemClock()
    controller = PoolController(ControllerSettings(min_workers=1, max_workers=2), clock, workers=1)
    pool = Pool(
        kafka_settings, group, flow, controller, processes, clock=clock, interval_s=1.0, migration="fluid"
    )
    keys = [f"k{i}" for i in range(400)]
    producer, _ = make_producer(kafka_settings)

    def send(rows: list[tuple[str, float]]) -> None:
        for key, ts in rows:
            producer.produce(source, json.dumps({"key": key, "ts": ts}).encode(), key.encode())
        producer.flush(10)

    popens = []
    try:
        send([(key, 0.1) for key in keys])
        pool.start()  # one worker, given every partition
        plan = pool._mover
        assert plan is not None
        assert set(plan.owners().values()) == {"w1"}
        send([(key, 0.2) for key in keys[::2]])
        pool._resize(2)  # starts w2, then moves half of the partitions to it, warm
        owners = plan.owners()
        assert sorted(owners.values()) == ["w1", "w1", "w2", "w2"]
        send([(key, 0.3) for key in keys[::3]])
        popens = [p.popen for p in processes.processes]
        pool._resize(1)  # moves everything back to w1, then stops w2
        assert set(plan.owners().values()) == {"w1"}
        assert popens[1].returncode == 0  # w2 owned nothing when it stopped: a clean stop
        send([(key, 0.4) for key in keys[::5]] + [(f"k{p}", 1_000_000.0) for p in range(8)])
        want = {key: 1 + (i % 2 == 0) + (i % 3 == 0) + (i % 5 == 0) for i, key in enumerate(keys)}
        with reading(kafka_settings, [sink]) as reader:

            def counted() -> dict[str, list[int]]:
                found: dict[str, list[int]] = {}
                for record in reader.records[sink]:
                    value = json.loads(record.value or b"{}")
                    if value["window_start"] == 0.0:
                        found.setdefault(value["key"], []).append(value["value"])
                return found

            reader.wait_for(lambda _: len(counted()) >= len(want), timeout=90, what="every count")
            reader.settle(0.5)
            assert counted() == {key: [n] for key, n in want.items()}
    finally:
        processes.stop_all()
        if pool._mover is not None:
            pool._mover.close()
