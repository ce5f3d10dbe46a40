"""S4: DS2 against a threshold autoscaler, sizing a pool of real ``cadenza worker`` processes.

The scaled pipeline's heavy step is I/O-bound (a simulated enrichment call that sleeps ``sleep_ms``
per record), so several workers fit on a small machine; a latency-sensitive tenant (a pass-through
with a 250 ms target, a few records per second) shares the pool, and its end-to-end latency shows
what each reconfiguration costs. Input arrives at a steady rate, then steps up.

First a **sweep** finds the minimum sufficient pool for each input rate: fixed pools of 1, 2, ...
workers run at that rate until one keeps up (its consumer lag stops growing). Then each autoscaler
runs from an under-provisioned start (1 worker) and an over-provisioned one (2x the minimum of the
first rate). Recorded every policy interval: workers running, desired, input rate, consumer lag, the
LS tenant's latency and the measured true rate per worker; per run and phase: scaling actions, how
many it took to reach the minimum pool and when, how long it then held without any action, and the
lag at the end of the phase.

    python benchmarks/scenarios/bench_scaling.py --out DIR [--quick]
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import statistics
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from _common import machine_and_commit, write_result
from bench_s1 import broker_settings
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from cadenza.infra.kafka.clients import make_admin, make_consumer, make_producer
from cadenza.infra.kafka.errors import KafkaClientError
from cadenza.infra.kafka.offsets import end_offsets
from cadenza.infra.kafka.topics import TopicSpec, ensure_topics
from cadenza.pipelines import load_pipelines
from cadenza.scaling.controller import ControllerSettings, PoolController, PoolDecision, RateWindow
from cadenza.scaling.observe import dataflow
from cadenza.scaling.pool import Controller, Pool, WorkerProcesses
from cadenza.scaling.threshold import ThresholdController
from cadenza.scheduling.clock import SystemClock
from cadenza.settings import KafkaSettings
from cadenza.worker.engine.topology import split

PARTITIONS = 12
"""Divisible by 1, 2, 3, 4 and 6: every pool size up to 4 splits the input evenly, as DS2 assumes."""
LS_PARTITIONS = 1
"""One: cooperative-sticky balances partition counts over all topics, not per topic, so with as many
LS as bulk partitions one worker could end up with every bulk partition (seen after a scale-in);
with one LS partition a worker holds at most one bulk partition more than an even share."""
LS_TARGET_MS = 250.0
AUTOSCALERS = ("ds2", "threshold")
"""The controllers a run can compare (``--autoscalers``)."""
MODULE = """
import time
from pydantic import BaseModel
from cadenza.pipelines import Pipeline

class Item(BaseModel):
    id: int

class Ping(BaseModel):
    id: int
    sent: float

def enrich(item: Item) -> int:
    time.sleep({sleep_s})  # the simulated enrichment call
    return item.id

def forward(ping: Ping) -> Ping:
    return ping

bulk = Pipeline("{name}", tenant="s4", latency_target="5s")
bulk.source("{source}", value=Item).map(enrich).sink("{sink}")

ls = Pipeline("{name}-ls", tenant="s4-ls", latency_target="{ls_target_ms}ms")
ls.source("{ls_source}", value=Ping).map(forward).sink("{ls_sink}")
"""


@dataclass(frozen=True)
class ScalingConfig:
    sleep_ms: float = 10.0
    """The enrichment call's sleep: a worker's true rate is about ``1000 / sleep_ms`` records per busy
    second. With ``rates`` it sets the load on the broker, which the embedded one cannot sustain for
    the ten-minute runs at 5 ms and 250 -> 420/s (see benchmarks/results/2026-11-26/NOTES.md, S4)."""
    rates: tuple[float, float] = (125.0, 210.0)
    """Records per second of the bulk input: the steady phase, then the step (minimum pools 2 and 3)."""
    steady_s: float = 390.0
    """Long enough to converge and then hold for five minutes."""
    step_s: float = 210.0
    sweep_s: float = 75.0
    ls_rate: float = 20.0
    interval_s: float = 10.0
    warmup_s: float = 20.0
    activation_windows: int = 2
    scale_down_windows: int = 3
    utilisation_target: float = 0.8
    max_workers: int = 8
    autoscalers: tuple[str, ...] = AUTOSCALERS
    migration: str = "fluid"
    """The pool's ``--migration``: ``fluid`` (plan ownership: each topic's partitions spread evenly
    over the workers, moved warm one at a time) or ``group`` (the consumer group's cooperative-sticky
    assignor, which balances partition counts over all topics: with the LS tenant's partition beside
    twelve bulk ones, three workers can hold 5, 4 and 3 bulk partitions)."""
    fetch_wait_ms: int = 250
    """The workers' ``CADENZA_FETCH_WAIT_MS``: the embedded broker's CPU grows with its fetch requests
    times the records it holds, so a long run needs fewer empty fetches than the worker's default
    (20 ms); the LS tenant pays for it in latency (its p99 about 250 ms instead of 130 ms)."""
    bulk_linger_ms: int = 500
    """``linger.ms`` of the bulk input's producer. The embedded broker pays per record batch
    (results/2026-11-28/NOTES.md, "The embedded broker pays per record batch") and batches are per
    partition: at 5 ms the bulk input (17.5 records/s per partition at 210/s) arrived one record to a
    batch, and the batches the broker held made every fetch slower as a run went on. The bulk tenant's
    target is 5 s."""
    worker_linger_ms: int = 5
    """The workers' ``CADENZA_LINGER_MS`` (their outputs: the bulk sink and LS's)."""


def quick_config() -> ScalingConfig:
    return ScalingConfig(steady_s=60.0, step_s=45.0, sweep_s=24.0, interval_s=3.0, warmup_s=6.0)


class FixedController:
    """A pool that never changes size: the sweep's control."""

    def __init__(self, workers: int) -> None:
        self._workers = workers

    @property
    def workers(self) -> int:
        return self._workers

    def reconfigured(self, workers: int) -> None:
        return

    def evaluate(self, window: RateWindow) -> PoolDecision:
        return PoolDecision(time.time(), "hold", self._workers, self._workers, None, "fixed pool")


def _lag(settings: KafkaSettings, group: str, topic: str) -> int | None:
    """The group's lag on ``topic``; None when the broker did not answer in time (noted, not fatal)."""
    try:
        ends = end_offsets(settings, [(topic, p) for p in range(PARTITIONS)])
        consumer, _ = make_consumer(settings, group)
        try:
            committed = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
        finally:
            consumer.close()
    except (KafkaClientError, KafkaException) as exc:
        print(f"lag of {group} on {topic} unavailable: {exc}")
        return None
    done = {tp.partition: max(tp.offset, 0) for tp in committed}
    return sum(ends[(topic, p)] - done.get(p, 0) for p in range(PARTITIONS))


def _true_rate(pool: Pool) -> float | None:
    """Mean true processing rate of the workers that ran the enrichment in the last window."""
    window = pool.last_window
    if window is None:
        return None
    bulk = [n for n in window.rates if "/source:" not in n and not n.split("/")[0].endswith("-ls")]
    rates = [r.true_processing for name in bulk for r in window.rates[name] if r.true_processing > 0]
    return round(sum(rates) / len(rates), 1) if rates else None


class LatencyProbe:
    """Sends the LS tenant's records at a fixed rate and measures each one's end-to-end latency."""

    def __init__(self, settings: KafkaSettings, source: str, sink: str, rate: float) -> None:
        self._settings = settings
        self._source, self._sink, self._rate = source, sink, rate
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._latencies_ms: list[float] = []
        self.sent = 0
        self.received = 0
        self._threads = [
            threading.Thread(target=self._send, daemon=True),
            threading.Thread(target=self._receive, daemon=True),
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(15)

    def take(self) -> list[float]:
        """The latencies measured since the last call (milliseconds)."""
        with self._lock:
            taken, self._latencies_ms = self._latencies_ms, []
        return taken

    def _send(self) -> None:
        producer, _ = make_producer(self._settings)
        period = 1.0 / self._rate
        next_at = time.monotonic()
        while not self._stop.is_set():
            producer.produce(
                self._source,
                json.dumps({"id": self.sent, "sent": time.time()}).encode(),
                str(self.sent).encode(),
            )
            self.sent += 1
            producer.poll(0)
            next_at += period
            self._stop.wait(max(0.0, next_at - time.monotonic()))
        producer.flush(10)

    def _receive(self) -> None:
        consumer, _ = make_consumer(
            self._settings, f"probe-{uuid.uuid4().hex[:6]}", **{"fetch.wait.max.ms": 10}
        )
        consumer.assign([TopicPartition(self._sink, p, 0) for p in range(LS_PARTITIONS)])
        try:
            while not self._stop.is_set():
                for message in consumer.consume(500, 0.1):
                    error = message.error()
                    if error is not None:
                        if error.code() != KafkaError._PARTITION_EOF:
                            raise RuntimeError(f"LS probe: {error}")
                        continue
                    value = message.value()
                    if value is None:
                        continue
                    latency_ms = (time.time() - float(json.loads(value)["sent"])) * 1000
                    with self._lock:
                        self._latencies_ms.append(latency_ms)
                        self.received += 1
        finally:
            consumer.close()


def _percentile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)


def run_one(
    settings: KafkaSettings,
    config: ScalingConfig,
    autoscaler: str,
    start: int,
    phases: Sequence[tuple[float, float]],
    *,
    logs: Path,
    progress: Callable[[str], None],
) -> dict[str, Any]:
    """One pool under ``autoscaler`` (``ds2``, ``threshold`` or ``fixed``) through ``phases``.

    Callers give each run a broker of its own (a fresh embedded one unless ``--bootstrap`` names
    one): the embedded broker keeps every record in memory and its CPU per request grows with what it
    holds (1.5 cores five minutes into an S4 run), so runs sharing one would not be comparable."""
    name = f"s4-{uuid.uuid4().hex[:6]}"
    source, sink, ls_source, ls_sink = f"{name}-in", f"{name}-out", f"{name}-ls-in", f"{name}-ls-out"
    specs = [TopicSpec(t, PARTITIONS) for t in (source, sink)]
    specs += [TopicSpec(t, LS_PARTITIONS) for t in (ls_source, ls_sink)]
    ensure_topics(make_admin(settings), specs)
    module = logs / f"{name}.py"
    module.write_text(
        MODULE.format(
            sleep_s=config.sleep_ms / 1000,
            name=name,
            source=source,
            sink=sink,
            ls_source=ls_source,
            ls_sink=ls_sink,
            ls_target_ms=int(LS_TARGET_MS),
        )
    )
    graphs = [p.compile() for p in load_pipelines(module)]
    flow = dataflow((g.name, split(g)) for g in graphs)
    clock = SystemClock()
    controller_settings = ControllerSettings(
        min_workers=1,
        max_workers=config.max_workers,
        policy_interval_s=config.interval_s,
        warmup_s=config.warmup_s,
        activation_windows=config.activation_windows,
        scale_down_windows=config.scale_down_windows,
        utilisation_target=config.utilisation_target,
    )
    controller: Controller
    if autoscaler == "ds2":
        controller = PoolController(controller_settings, clock, workers=start)
    elif autoscaler == "threshold":
        controller = ThresholdController(controller_settings, clock, workers=start)
    else:
        controller = FixedController(start)
    group = f"g-{name}"
    processes = WorkerProcesses(
        [str(module), "--group", group],
        env={
            **os.environ,
            "CADENZA_BOOTSTRAP_SERVERS": settings.bootstrap_servers,
            "CADENZA_RATE_WINDOW_S": str(config.interval_s),
            "CADENZA_FETCH_WAIT_MS": str(config.fetch_wait_ms),
            "CADENZA_LINGER_MS": str(config.worker_linger_ms),
        },
        ownership_plan=config.migration != "group",
    )
    pool = Pool(
        settings,
        group,
        flow,
        controller,
        processes,
        clock=clock,
        interval_s=config.interval_s,
        migration=config.migration,
    )
    rate = [phases[0][0]]
    stop = threading.Event()

    def load() -> None:
        producer, _ = make_producer(settings, **{"linger.ms": config.bulk_linger_ms})
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
    probe = LatencyProbe(settings, ls_source, ls_sink, config.ls_rate)
    timeline: list[dict[str, Any]] = []
    all_latencies: list[float] = []
    pool.start()
    started = time.monotonic()
    loader.start()
    probe.start()
    try:
        for index, (phase_rate, seconds) in enumerate(phases):
            rate[0] = phase_rate
            phase_end = time.monotonic() + seconds
            while time.monotonic() < phase_end:
                time.sleep(config.interval_s)
                decision = pool.step()
                latencies = probe.take()
                if timeline:  # the first interval measures the pool's start-up, not the autoscaler
                    all_latencies.extend(latencies)
                timeline.append(
                    {
                        "t": round(time.monotonic() - started, 2),
                        "phase": index,
                        "input_rate": phase_rate,
                        "workers": len(processes),
                        "desired": controller.workers,
                        "action": None if decision is None else decision.action,
                        "lag": _lag(settings, group, source),
                        "true_rate_per_worker": _true_rate(pool),
                        "ls_p99_ms": _percentile(latencies, 0.99),
                        "ls_max_ms": round(max(latencies), 1) if latencies else None,
                        "ls_records": len(latencies),
                    }
                )
                progress(f"{autoscaler} from {start}: {timeline[-1]}")
    finally:
        stop.set()
        probe.stop()
        pool.close()
    scalings = [p for p in timeline if p["action"] in ("scale_up", "scale_down")]
    directions = [1 if p["action"] == "scale_up" else -1 for p in scalings]
    met = sum(1 for x in all_latencies if x <= LS_TARGET_MS)
    return {
        "autoscaler": autoscaler,
        "start_workers": start,
        "timeline": timeline,
        "scaling_actions": len(scalings),
        "last_action_s": scalings[-1]["t"] if scalings else None,
        "direction_changes": sum(1 for a, b in itertools.pairwise(directions) if a != b),
        "final_workers": timeline[-1]["workers"] if timeline else start,
        "final_lag": timeline[-1]["lag"] if timeline else None,
        "ls": {
            "excludes": "the first interval (the pool's start-up)",
            "sent": probe.sent,
            "received": probe.received,
            "p50_ms": _percentile(all_latencies, 0.5),
            "p99_ms": _percentile(all_latencies, 0.99),
            "max_ms": round(max(all_latencies), 1) if all_latencies else None,
            "deadline_met_ratio": round(met / len(all_latencies), 4) if all_latencies else None,
        },
    }


def keeps_up(run: dict[str, Any], rate: float) -> dict[str, Any]:
    """Whether a fixed pool kept up: its lag grew by under 2% of the input rate over the last two
    thirds of the run (the first third holds the group's first rebalance)."""
    timeline = [p for p in run["timeline"] if p["lag"] is not None]
    tail = timeline[len(timeline) // 3 :]
    if len(tail) < 2:
        raise ValueError("the sweep run is too short to measure a lag trend")
    growth = (tail[-1]["lag"] - tail[0]["lag"]) / (tail[-1]["t"] - tail[0]["t"])
    return {
        "workers": run["start_workers"],
        "lag_growth_per_s": round(growth, 1),
        "final_lag": tail[-1]["lag"],
        "true_rate_per_worker": statistics.median(
            [p["true_rate_per_worker"] for p in tail if p["true_rate_per_worker"]] or [0.0]
        ),
        "keeps_up": growth < 0.02 * rate,
    }


def sweep(
    bootstrap: str | None, config: ScalingConfig, *, logs: Path, progress: Callable[[str], None]
) -> dict[str, Any]:
    """The minimum sufficient pool for each input rate, from fixed pools of 1, 2, ... workers."""
    result: dict[str, Any] = {}
    first = 1
    for rate in config.rates:
        points: list[dict[str, Any]] = []
        minimum: int | None = None
        for workers in range(first, config.max_workers + 1):
            with broker_settings(bootstrap) as settings:
                run = run_one(
                    settings, config, "fixed", workers, [(rate, config.sweep_s)], logs=logs, progress=progress
                )
            points.append(keeps_up(run, rate))
            progress(f"sweep at {rate:g}/s: {points[-1]}")
            if points[-1]["keeps_up"]:
                minimum = workers
                break
        result[f"{rate:g}"] = {"minimum": minimum, "points": points}
        # A higher rate needs at least as many workers: its sweep starts at the last minimum.
        first = minimum or config.max_workers
    return result


def phase_summary(run: dict[str, Any], phase: int, minimum: int | None, seconds: float) -> dict[str, Any]:
    """How a run reached and held the minimum pool in one phase.

    ``actions_to_minimum``: scaling actions in the phase up to the one after which the pool stayed at
    the minimum until the phase's end (None if it did not end there); ``held_s``: from that moment (or
    the phase's start, if it never moved) to the phase's end, with no action in between.
    """
    points = [p for p in run["timeline"] if p["phase"] == phase]
    if not points:
        return {}
    actions = [p for p in points if p["action"] in ("scale_up", "scale_down")]
    phase_start = points[0]["t"] - run_interval(run)
    last_change_t = actions[-1]["t"] if actions else phase_start
    at_minimum = points[-1]["desired"] == minimum
    return {
        "minimum": minimum,
        "scaling_actions": len(actions),
        "actions_to_minimum": len(actions) if at_minimum else None,
        "converged_at_s": round(last_change_t - phase_start, 1) if at_minimum else None,
        "held_s": round(max(0.0, phase_start + seconds - last_change_t), 1) if at_minimum else 0.0,
        "final_workers": points[-1]["workers"],
        "final_lag": points[-1]["lag"],
        "lag_drained": points[-1]["lag"] is not None and points[-1]["lag"] <= points[-1]["input_rate"],
    }


def run_interval(run: dict[str, Any]) -> float:
    timeline = run["timeline"]
    return float(timeline[1]["t"] - timeline[0]["t"]) if len(timeline) > 1 else 0.0


def targets(runs: list[dict[str, Any]], config: ScalingConfig) -> dict[str, bool]:
    """The issue's targets for DS2, each from every DS2 run."""
    ds2 = [r for r in runs if r["autoscaler"] == "ds2"]
    steady = [r["phases"][0] for r in ds2]
    return {
        "ds2_minimum_in_at_most_2_decisions": all(
            s.get("actions_to_minimum") is not None and s["actions_to_minimum"] <= 2 for s in steady
        ),
        "ds2_held_5_minutes_without_oscillation": all(s.get("held_s", 0.0) >= 300.0 for s in steady),
        "ds2_lag_drained": all(p.get("lag_drained", False) for r in ds2 for p in r["phases"]),
    }


def plot(runs: list[dict[str, Any]], minimum: dict[str, Any], path: Path) -> None:
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig, axes = plt.subplots(4, 1, figsize=(10, 12), sharex=True)
    for run in runs:
        label = f"{run['autoscaler']} from {run['start_workers']}"
        t = [p["t"] for p in run["timeline"]]
        axes[0].step(t, [p["workers"] for p in run["timeline"]], where="post", label=label)
        axes[1].plot(t, [p["input_rate"] for p in run["timeline"]], label=label)
        axes[2].plot(t, [math.nan if p["lag"] is None else p["lag"] for p in run["timeline"]], label=label)
        axes[3].plot(
            t, [math.nan if p["ls_p99_ms"] is None else p["ls_p99_ms"] for p in run["timeline"]], label=label
        )
    for rate, found in minimum.items():
        if found["minimum"] is not None:
            axes[0].axhline(found["minimum"], color="grey", linestyle=":", linewidth=1)
            axes[0].annotate(f"minimum at {rate}/s", (0, found["minimum"]), fontsize="small", color="grey")
    axes[3].axhline(LS_TARGET_MS, color="red", linestyle="--", linewidth=1, label="LS target")
    axes[0].set_ylabel("workers")
    axes[1].set_ylabel("input rate (records/s)")
    axes[2].set_ylabel("consumer lag (records)")
    axes[3].set_ylabel("LS latency p99 per interval (ms)")
    axes[3].set_yscale("log")
    axes[3].set_xlabel("seconds")
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
    phases = [(config.rates[0], config.steady_s), (config.rates[1], config.step_s)]
    minimum = sweep(bootstrap, config, logs=logs, progress=progress)
    first_minimum = minimum[f"{config.rates[0]:g}"]["minimum"] or 1
    over_start = min(config.max_workers, 2 * first_minimum)
    for autoscaler in config.autoscalers:
        for start in (1, over_start):
            # What is measured so far is kept, should a later run fail.
            write_result(out, "scaling.json", _result(config, phases, minimum, runs, complete=False))
            with broker_settings(bootstrap) as settings:
                run = run_one(settings, config, autoscaler, start, phases, logs=logs, progress=progress)
            run["phases"] = [
                phase_summary(run, i, minimum[f"{rate:g}"]["minimum"], seconds)
                for i, (rate, seconds) in enumerate(phases)
            ]
            runs.append(run)
    result = _result(config, phases, minimum, runs, complete=True)
    write_result(out, "scaling.json", result)
    plot(runs, minimum, out / "scaling.png")
    return result


def _result(
    config: ScalingConfig,
    phases: Sequence[tuple[float, float]],
    minimum: dict[str, Any],
    runs: list[dict[str, Any]],
    *,
    complete: bool,
) -> dict[str, Any]:
    return {
        "benchmark": "s4_scaling",
        "config": {
            "sleep_ms": config.sleep_ms,
            "phases": [list(p) for p in phases],
            "sweep_s": config.sweep_s,
            "ls_rate": config.ls_rate,
            "ls_target_ms": LS_TARGET_MS,
            "interval_s": config.interval_s,
            "warmup_s": config.warmup_s,
            "activation_windows": config.activation_windows,
            "scale_down_windows": config.scale_down_windows,
            "utilisation_target": config.utilisation_target,
            "max_workers": config.max_workers,
            "partitions": PARTITIONS,
            "worker_fetch_wait_ms": config.fetch_wait_ms,
            "bulk_linger_ms": config.bulk_linger_ms,
            "worker_linger_ms": config.worker_linger_ms,
            "autoscalers": list(config.autoscalers),
            "migration": config.migration,
        },
        "minimum_pool": minimum,
        "runs": runs,
        "complete": complete,
        "targets": targets(runs, config) if complete else None,
        **machine_and_commit(),
    }


def format_table(result: dict[str, Any]) -> str:
    minimum = {rate: found["minimum"] for rate, found in result["minimum_pool"].items()}
    lines = [f"minimum sufficient pool (sweep of fixed pools): {minimum}"]
    lines.append(
        f"{'autoscaler':10s} {'start':>5s} {'phase':>5s} {'actions':>7s} {'to min':>6s} {'conv(s)':>7s} "
        f"{'held(s)':>7s} {'final':>5s} {'lag':>6s} {'LS p99':>7s} {'LS met':>6s}"
    )
    for run in result["runs"]:
        for index, phase in enumerate(run["phases"]):
            lines.append(
                f"{run['autoscaler']:10s} {run['start_workers']:>5d} {index:>5d} "
                f"{phase['scaling_actions']:>7d} {phase['actions_to_minimum']!s:>6s} "
                f"{phase['converged_at_s']!s:>7s} {phase['held_s']!s:>7s} {phase['final_workers']:>5d} "
                f"{phase['final_lag']!s:>6s} {run['ls']['p99_ms']!s:>7s} "
                f"{run['ls']['deadline_met_ratio']!s:>6s}"
            )
    lines.append(f"targets: {result['targets']}")
    return "\n".join(lines)


def _two_rates(text: str) -> tuple[float, float]:
    """``--rates A,B``: two positive records-per-second figures, or argparse's usage error."""
    try:
        steady, step = (float(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected two rates 'A,B', got {text!r}") from None
    if steady <= 0 or step <= 0:
        raise argparse.ArgumentTypeError(f"rates must be positive, got {text!r}")
    return steady, step


def _autoscalers(text: str) -> tuple[str, ...]:
    """``--autoscalers ds2,threshold``: a non-empty subset of :data:`AUTOSCALERS`, or argparse's
    usage error."""
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    if not names or set(names) - set(AUTOSCALERS):
        raise argparse.ArgumentTypeError(f"expected ds2 and/or threshold, got {text!r}")
    return names


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--bootstrap", default=None)
    parser.add_argument(
        "--sleep-ms",
        type=float,
        default=None,
        help="the enrichment call's sleep per record (default 10); with --rates, the load on the broker",
    )
    parser.add_argument(
        "--rates",
        type=_two_rates,
        default=None,
        help="bulk records/s of the steady phase and the step, 'A,B' (default 125,210)",
    )
    parser.add_argument(
        "--fetch-wait-ms", type=int, default=None, help="the workers' CADENZA_FETCH_WAIT_MS (default 250)"
    )
    parser.add_argument(
        "--migration",
        choices=("group", "all", "fluid", "matching"),
        default=None,
        help="how the pool moves partitions (default fluid: plan ownership, each topic spread evenly)",
    )
    parser.add_argument(
        "--bulk-linger-ms", type=int, default=None, help="the bulk input producer's linger.ms (default 500)"
    )
    parser.add_argument(
        "--worker-linger-ms", type=int, default=None, help="the workers' CADENZA_LINGER_MS (default 5)"
    )
    parser.add_argument(
        "--autoscalers",
        type=_autoscalers,
        default=None,
        help="which autoscalers to run, e.g. 'ds2' (default ds2,threshold)",
    )
    args = parser.parse_args(argv)
    config = quick_config() if args.quick else ScalingConfig()
    if args.bulk_linger_ms is not None:
        config = replace(config, bulk_linger_ms=args.bulk_linger_ms)
    if args.worker_linger_ms is not None:
        config = replace(config, worker_linger_ms=args.worker_linger_ms)
    if args.autoscalers is not None:
        config = replace(config, autoscalers=args.autoscalers)
    if args.fetch_wait_ms is not None:
        config = replace(config, fetch_wait_ms=args.fetch_wait_ms)
    if args.sleep_ms is not None:
        config = replace(config, sleep_ms=args.sleep_ms)
    if args.rates is not None:
        config = replace(config, rates=args.rates)
    if args.migration is not None:
        config = replace(config, migration=args.migration)
    print(format_table(run_benchmark(args.out, config=config, bootstrap=args.bootstrap)))


if __name__ == "__main__":
    main()
