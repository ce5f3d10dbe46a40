"""S4: DS2 against a threshold autoscaler, sizing a pool of real ``cadenza worker`` processes.

The pipeline's heavy step is I/O-bound (a simulated enrichment call that sleeps ``sleep_ms`` per
record), so several workers fit on a small machine. Input arrives at a fixed rate, then steps up.
Each autoscaler runs from an under-provisioned start (1 worker) and an over-provisioned one
(``over_start`` workers). Recorded every policy interval: workers running, desired, arrival rate
and consumer lag; per run: scaling actions, time of the last one, direction changes, final lag.

The minimum sufficient pool is estimated from the measured true rate (``ceil(rate / true rate per
worker)``), not found by a sweep of fixed pools.

    python benchmarks/bench_scaling.py --out DIR [--quick]
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _common import machine_and_commit, write_result
from bench_s1 import broker_settings
from confluent_kafka import TopicPartition

from cadenza.infra.kafka.clients import make_admin, make_consumer, make_producer
from cadenza.infra.kafka.offsets import end_offsets
from cadenza.infra.kafka.topics import TopicSpec, ensure_topics
from cadenza.pipelines import load_pipelines
from cadenza.scaling.controller import ControllerSettings, PoolController
from cadenza.scaling.observe import dataflow
from cadenza.scaling.pool import Controller, Pool, WorkerProcesses
from cadenza.scaling.threshold import ThresholdController
from cadenza.scheduling.clock import SystemClock
from cadenza.settings import KafkaSettings
from cadenza.worker.topology import split

PARTITIONS = 8
MODULE = """
import time
from pydantic import BaseModel
from cadenza.pipelines import Pipeline

class Item(BaseModel):
    id: int

def enrich(item: Item) -> int:
    time.sleep({sleep_s})  # the simulated enrichment call
    return item.id

pipeline = Pipeline("{name}", tenant="s4", latency_target="5s")
pipeline.source("{source}", value=Item).map(enrich).sink("{sink}")
"""


@dataclass(frozen=True)
class ScalingConfig:
    sleep_ms: float = 5.0
    phases: tuple[tuple[float, float], ...] = ((300.0, 300.0), (500.0, 300.0))
    """(records per second, seconds) of input, in order: steady, then a step."""
    interval_s: float = 10.0
    warmup_s: float = 20.0
    max_workers: int = 8
    over_start: int = 6
    autoscalers: tuple[str, ...] = ("ds2", "threshold")


def quick_config() -> ScalingConfig:
    return ScalingConfig(phases=((300.0, 45.0), (500.0, 45.0)), interval_s=3.0, warmup_s=6.0, over_start=4)


def _lag(settings: KafkaSettings, group: str, topic: str) -> int:
    ends = end_offsets(settings, [(topic, p) for p in range(PARTITIONS)])
    consumer, _ = make_consumer(settings, group)
    try:
        committed = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
    finally:
        consumer.close()
    done = {tp.partition: max(tp.offset, 0) for tp in committed}
    return sum(ends[(topic, p)] - done.get(p, 0) for p in range(PARTITIONS))


def _true_rate(pool: Pool) -> float | None:
    """Mean true processing rate of the workers that ran the enrichment in the last window."""
    window = pool.last_window
    if window is None:
        return None
    has_upstream = {down for _, down in window.edges}
    rates = [
        r.true_processing
        for name, instances in window.rates.items()
        if name in has_upstream
        for r in instances
        if r.true_processing > 0
    ]
    return round(sum(rates) / len(rates), 1) if rates else None


def run_one(
    settings: KafkaSettings,
    config: ScalingConfig,
    autoscaler: str,
    start: int,
    *,
    logs: Path,
    progress: Callable[[str], None],
) -> dict[str, Any]:
    name = f"s4-{uuid.uuid4().hex[:6]}"
    source, sink = f"{name}-in", f"{name}-out"
    ensure_topics(make_admin(settings), [TopicSpec(source, PARTITIONS), TopicSpec(sink, PARTITIONS)])
    module = logs / f"{name}.py"
    module.write_text(MODULE.format(sleep_s=config.sleep_ms / 1000, name=name, source=source, sink=sink))
    graphs = [p.compile() for p in load_pipelines(module)]
    flow = dataflow((g.name, split(g)) for g in graphs)
    clock = SystemClock()
    controller_settings = ControllerSettings(
        min_workers=1,
        max_workers=config.max_workers,
        policy_interval_s=config.interval_s,
        warmup_s=config.warmup_s,
        activation_windows=2,
        scale_down_windows=3,
    )
    controller: Controller
    if autoscaler == "ds2":
        controller = PoolController(controller_settings, clock, workers=start)
    else:
        controller = ThresholdController(controller_settings, clock, workers=start)
    group = f"g-{name}"
    processes = WorkerProcesses(
        [str(module), "--group", group],
        env={
            **os.environ,
            "CADENZA_BOOTSTRAP_SERVERS": settings.bootstrap_servers,
            "CADENZA_RATE_WINDOW_S": str(config.interval_s),
        },
    )
    pool = Pool(settings, group, flow, controller, processes, clock=clock, interval_s=config.interval_s)
    rate = [config.phases[0][0]]
    stop = threading.Event()

    def load() -> None:
        producer, _ = make_producer(settings)
        sent, total = 0, 0.0
        last = time.monotonic()
        while not stop.is_set():
            now = time.monotonic()
            total += (now - last) * rate[0]
            last = now
            for i in range(sent, int(total)):
                producer.produce(source, json.dumps({"id": i}).encode(), str(i).encode())
            sent = max(sent, int(total))
            producer.poll(0)
            time.sleep(0.02)
        producer.flush(10)

    loader = threading.Thread(target=load, daemon=True)
    timeline: list[dict[str, Any]] = []
    processes.scale_to(start)
    controller.reconfigured(start)
    started = time.monotonic()
    loader.start()
    try:
        for phase_rate, seconds in config.phases:
            rate[0] = phase_rate
            phase_end = time.monotonic() + seconds
            while time.monotonic() < phase_end:
                time.sleep(config.interval_s)
                decision = pool.step()
                timeline.append(
                    {
                        "t": round(time.monotonic() - started, 2),
                        "input_rate": phase_rate,
                        "workers": len(processes),
                        "desired": controller.workers,
                        "action": None if decision is None else decision.action,
                        "lag": _lag(settings, group, source),
                        "true_rate_per_worker": _true_rate(pool),
                    }
                )
                progress(f"{autoscaler} from {start}: {timeline[-1]}")
    finally:
        stop.set()
        processes.stop_all()
    scalings = [p for p in timeline if p["action"] in ("scale_up", "scale_down")]
    directions = [1 if p["action"] == "scale_up" else -1 for p in scalings]
    return {
        "autoscaler": autoscaler,
        "start_workers": start,
        "timeline": timeline,
        "scaling_actions": len(scalings),
        "last_action_s": scalings[-1]["t"] if scalings else None,
        "direction_changes": sum(1 for a, b in itertools.pairwise(directions) if a != b),
        "final_workers": timeline[-1]["workers"] if timeline else start,
        "final_lag": timeline[-1]["lag"] if timeline else None,
    }


def minimum_pool(runs: list[dict[str, Any]], config: ScalingConfig) -> dict[str, int | None]:
    """Per input rate: ceil(rate / median measured true rate per worker) over every run's windows."""
    measured = sorted(
        p["true_rate_per_worker"] for run in runs for p in run["timeline"] if p["true_rate_per_worker"]
    )
    if not measured:
        return {str(rate): None for rate, _ in config.phases}
    median = measured[len(measured) // 2]
    return {str(rate): math.ceil(rate / median) for rate, _ in config.phases}


def plot(runs: list[dict[str, Any]], path: Path) -> None:
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig, axes = plt.subplots(3, 1, figsize=(9, 9), sharex=True)
    for run in runs:
        label = f"{run['autoscaler']} from {run['start_workers']}"
        t = [p["t"] for p in run["timeline"]]
        axes[0].step(t, [p["workers"] for p in run["timeline"]], where="post", label=label)
        axes[1].plot(t, [p["lag"] for p in run["timeline"]], label=label)
        axes[2].plot(t, [p["input_rate"] for p in run["timeline"]], label=label)
    axes[0].set_ylabel("workers")
    axes[1].set_ylabel("consumer lag (records)")
    axes[2].set_ylabel("input rate (records/s)")
    axes[2].set_xlabel("seconds")
    axes[0].legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def run_benchmark(
    out: Path,
    *,
    config: ScalingConfig,
    bootstrap: str | None = None,
    progress: Callable[[str], None] = print,
) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    logs = out / "logs"
    logs.mkdir(exist_ok=True)
    runs: list[dict[str, Any]] = []
    with broker_settings(bootstrap) as settings:
        for autoscaler in config.autoscalers:
            for start in (1, config.over_start):
                runs.append(run_one(settings, config, autoscaler, start, logs=logs, progress=progress))
    result: dict[str, Any] = {
        "benchmark": "s4_scaling",
        "config": {
            "sleep_ms": config.sleep_ms,
            "phases": [list(p) for p in config.phases],
            "interval_s": config.interval_s,
            "warmup_s": config.warmup_s,
            "max_workers": config.max_workers,
            "partitions": PARTITIONS,
        },
        "minimum_pool_estimate": minimum_pool(runs, config),
        "runs": runs,
        **machine_and_commit(),
    }
    write_result(out, "scaling.json", result)
    plot(runs, out / "scaling.png")
    return result


def format_table(result: dict[str, Any]) -> str:
    lines = [f"minimum pool (estimated from measured true rates): {result['minimum_pool_estimate']}"]
    lines.append(
        f"{'autoscaler':10s} {'start':>5s} {'actions':>7s} {'last(s)':>8s} "
        f"{'flips':>5s} {'final':>5s} {'lag':>7s}"
    )
    for run in result["runs"]:
        lines.append(
            f"{run['autoscaler']:10s} {run['start_workers']:>5d} {run['scaling_actions']:>7d} "
            f"{run['last_action_s'] if run['last_action_s'] is not None else '-':>8} "
            f"{run['direction_changes']:>5d} {run['final_workers']:>5d} {run['final_lag']!s:>7s}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--bootstrap", default=None)
    args = parser.parse_args(argv)
    config = quick_config() if args.quick else ScalingConfig()
    print(format_table(run_benchmark(args.out, config=config, bootstrap=args.bootstrap)))


if __name__ == "__main__":
    main()
