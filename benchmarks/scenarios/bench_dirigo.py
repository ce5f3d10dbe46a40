"""S6: Dirigo-style lessees on one worker, three tenants, with and without lessees.

Three tenants on one ``cadenza worker`` (``s6_pipelines.py``):

- **LS**: S1's click count (100 clicks/s over 20 users, 1 s windows), target 300 ms.
- **BA** (BA-heavy): a map of about 2 ms of CPU per record (``burn_cpu``), in S1's Pareto bursts
  (4x the mean inside a burst), at a mean ``load`` (1.2) of what one worker process sustains for BA
  beside LS on this machine, calibrated first as S1 calibrates (:func:`cadenza.demo.s1.calibrate`).
  Target 5 s, S1's.
- **IO**: a map that blocks 50 ms per record (``time.sleep``), 100 records/s, target 1 s: five calls
  in flight on average, which one thread cannot keep up with.

Systems (``SYSTEMS``): ``fifo`` and ``cameo`` without lessees (every map ``parallel=1``, on the
worker's one thread); ``cameo-auto``, both maps ``parallel="auto"`` (BA on process lessees, IO on
thread lessees) leased by the scheduler's slack; ``cameo-max``, the most lessees the worker allows,
always on: BA ``parallel=cores-1`` processes (at least 2, which the worker's budget holds to one
process lessee on 2 cores), IO ``parallel=max_thread_lessees`` threads (the worker's default, 16).

Records are sized as S1's ``heavy`` sizing (LS 100/s, 2 partitions, producers lingering 25 ms for LS
and 50 ms for BA, IO's 50 ms), so that the embedded broker stays a small share of the two cores; its
share while measured is in the JSON (``broker_cores``) and the table.

Per system and tenant: the share of expected results within target (satisfaction), p50/p99, CPU
seconds (the maps' own thread CPU time, stamped on each output wherever the call ran; LS: the
worker's run time of its operators, all CPU on its thread), lessee seconds (the worker's
``cadenza_lessee_seconds_total``; null where the worker exports none), the load the tenant actually
got; per run the ``cadenza_lessees`` gauge sampled over time per step, and the CPU of the worker
(with its lessee processes) and of the broker. ``targets`` judges the issue's four checks.

    python benchmarks/scenarios/bench_dirigo.py --out DIR [--quick] [--systems fifo,cameo]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from dirigo_metrics import TENANTS, LeaseSampler, lessee_usage, run_seconds
from dirigo_report import check_targets, format_table, median_known, ms_text, percent_text, plot, summarise

from cadenza.demo.machine import machine_and_commit, write_result
from cadenza.demo.s1 import calibrate
from cadenza.demo.s1_config import WARMUP_FIRST_ID, Capacity, S1Config, sized
from cadenza.demo.s1_io import Output, OutputReader, Send, Topics, plan, send_phase
from cadenza.demo.s1_process import CpuSample, broker_with_pid, free_port, run_broker, system_process
from cadenza.demo.s1_results import (
    expectations,
    job_results,
    matched_jobs,
    measure,
    strip_latencies,
    tenant_stats,
    window_results,
)
from cadenza.demo.worker_metrics import kafka_requests, loop_stalls, mean_run_seconds, scrape
from cadenza.infra.kafka.clients import make_admin, make_producer
from cadenza.infra.kafka.topics import ensure_topics
from cadenza.infra.metrics.quantiles import sample_quantile
from cadenza.settings import KafkaSettings
from cadenza.worker.config import WorkerConfig

__all__ = [
    "SYSTEMS",
    "DirigoConfig",
    "System",
    "check_targets",
    "format_table",
    "main",
    "quick_config",
    "run_benchmark",
]

Progress = Callable[[str], None]
SCENARIOS_DIR = Path(__file__).resolve().parent
#: The worker loads the tenants' pipelines by name (see ``s6_pipelines``' docstring).
PIPELINES_MODULE = "s6_pipelines"


def _worker_default(setting: str) -> int:
    return int(WorkerConfig.model_fields[setting].default)


@dataclass(frozen=True)
class System:
    """A system of S6: a scheduling policy and how its maps get lessees (``off``: ``parallel=1``;
    ``auto``: ``parallel="auto"``; ``max``: the most the worker allows, always on)."""

    policy: str
    lessees: str


SYSTEMS: dict[str, System] = {
    "fifo": System("fifo", "off"),
    "cameo": System("cameo", "off"),
    "cameo-auto": System("cameo", "auto"),
    "cameo-max": System("cameo", "max"),
}

#: S1's ``heavy`` sizing (LS 100/s over 20 users, 2 partitions, lingers of 25 ms for LS and 50 ms for
#: BA: fewer, fuller produce requests, which the embedded broker pays for more than for records) with
#: BA-heavy's 2 ms of CPU per record at 1.2x one process's capacity. LS's capacity is not measured:
#: 100 clicks/s are a small share of a worker.
BASE = sized("heavy", ba_cost_ms=2.0, load=1.2, calibrate_ls=False)
#: The fewest process lessees ``cameo-max`` asks of BA's map: ``parallel=1`` is the worker's own
#: thread. Where ``cores - 1`` is 1 (2 cores), ``parallel=2`` is held to the one process lessee the
#: worker's budget allows, always leased, and the worker's thread still helps with BA's calls when
#: it has nothing else to run, as under ``"auto"``. (A timeout would also keep one lessee at
#: ``parallel=1``, but a step with a timeout never runs on the worker's thread: BA would have less
#: capacity than under ``"auto"``, 1 core instead of 1 and the thread's spare.)
ALWAYS_ON_MIN_PROCESSES = 2


@dataclass(frozen=True)
class DirigoConfig:
    """S6's knobs: ``base`` holds LS's and BA's (S1's config: rates, bursts, targets, durations);
    the rest is IO's, the lessees' and the run's."""

    base: S1Config = BASE
    io_rate: float = 100.0
    io_sleep_s: float = 0.05
    io_target: float = 1.0
    io_linger_ms: float = 50.0
    systems: tuple[str, ...] = tuple(SYSTEMS)
    repetitions: int = 3
    #: The worker's core budget (``CADENZA_CORES``): process lessees are at most ``cores - 1``.
    cores: int = field(default_factory=lambda: os.cpu_count() or 2)
    #: The worker's ``max_thread_lessees``, and the IO thread lessees ``cameo-max`` keeps on: the
    #: worker's own default, so "the maximum lessees" is what a worker allows unless told otherwise.
    max_thread_lessees: int = field(
        default_factory=lambda: WorkerConfig.model_fields["max_thread_lessees"].default
    )
    #: Seconds between two samples of the ``cadenza_lessees`` gauge.
    sample_interval: float = 0.5

    def __post_init__(self) -> None:
        unknown = sorted(set(self.systems) - set(SYSTEMS))
        if unknown or not self.systems:
            raise ValueError(
                f"unknown systems {unknown or list(self.systems)}; choose from {', '.join(SYSTEMS)}"
            )
        if self.repetitions < 1:
            raise ValueError(f"repetitions must be at least 1, got {self.repetitions}")
        if self.cores < 1 or self.max_thread_lessees < 1:
            raise ValueError("cores and max_thread_lessees must be at least 1")


def quick_config(**overrides: Any) -> DirigoConfig:
    """One repetition of 20 s per system and a shorter calibration: about three minutes on 2 cores."""
    base = replace(BASE, duration=20.0, warmup=5.0, drain=10.0, calibration_skip=4.0, calibration_measure=8.0)
    return DirigoConfig(**{"base": base, "repetitions": 1, **overrides})


# -- what each system's worker is told -------------------------------------------------------------


def step_env(system: System, config: DirigoConfig) -> dict[str, str]:
    """The ``S6_*`` variables that declare how ``s6_pipelines``' two maps run under ``system``."""
    if system.lessees == "off":
        ba, io = "1", "1"
    elif system.lessees == "auto":
        ba, io = "auto", "auto"
    else:
        ba, io = str(max(config.cores - 1, ALWAYS_ON_MIN_PROCESSES)), str(config.max_thread_lessees)
    return {
        "S6_BA_PARALLEL": ba,
        "S6_BA_EXECUTOR": "process",
        "S6_IO_PARALLEL": io,
        "S6_IO_EXECUTOR": "thread",
    }


def worker_env(system: System, config: DirigoConfig, topics: DirigoTopics) -> dict[str, str]:
    """Everything a worker of S6 gets beyond S1's variables: IO's topics and cost, the maps' lessees,
    the worker's lessee settings, and ``PYTHONPATH`` for ``s6_pipelines`` (its lessee processes
    inherit it)."""
    path = os.environ.get("PYTHONPATH", "")
    return {
        **step_env(system, config),
        "S6_IO_IN": topics.io_in,
        "S6_IO_OUT": topics.io_out,
        "S6_IO_TARGET": f"{config.io_target:g}",
        "S6_IO_SLEEP": f"{config.io_sleep_s:g}",
        "CADENZA_CORES": str(config.cores),
        "CADENZA_MAX_THREAD_LESSEES": str(config.max_thread_lessees),
        "PYTHONPATH": os.pathsep.join(p for p in (str(SCENARIOS_DIR), path) if p),
    }


# -- the input -------------------------------------------------------------------------------------


@dataclass
class DirigoTopics(Topics):
    io_in: str
    io_out: str

    @classmethod
    def fresh(cls, run: str) -> DirigoTopics:
        s1 = Topics.fresh(run)
        return cls(s1.ls_in, s1.ls_out, s1.ba_in, s1.ba_out, f"s6-{run}-io-in", f"s6-{run}-io-out")

    def inputs(self) -> dict[str, str]:
        return {**super().inputs(), "IO": self.io_in}

    def outputs(self) -> dict[str, str]:
        return {**super().outputs(), "IO": self.io_out}


def io_sends(rate: float, duration: float, first_id: int = 0) -> list[Send]:
    """IO's requests: steady at ``rate``, ids from ``first_id`` (the warm-up's far from the phase's)."""
    return [
        Send(i / rate, "IO", f"r{first_id + i}", {"id": first_id + i, "payload": f"io-{first_id + i}"})
        for i in range(int(duration * rate))
    ]


def plan_phase(
    config: DirigoConfig, ba_rate: float, duration: float, *, bursts: bool, seed: int, first_id: int = 0
) -> list[Send]:
    """S1's plan of LS and BA (:func:`cadenza.demo.s1_io.plan`) with IO's requests, in send order."""
    sends = plan(config.base, ba_rate, duration, bursts=bursts, seed=seed, first_id=first_id)
    sends += io_sends(config.io_rate, duration, first_id)
    sends.sort(key=lambda send: send.at)
    return sends


def planned_rates(config: DirigoConfig, capacity: Capacity) -> dict[str, float]:
    """What the calibration makes of the input: BA's mean and in-burst rates, IO's calls in flight."""
    ba = config.base.load * capacity.ba_rps
    return {
        "ba_capacity_rps": round(capacity.ba_rps, 1),
        "ba_mean_rps": round(ba, 1),
        "ba_burst_rps": round(ba * config.base.burst_peak, 1),
        "ba_cpu_cores": round(ba * config.base.ba_cost_ms / 1000.0, 3),
        "io_rps": config.io_rate,
        "io_in_flight": round(config.io_rate * config.io_sleep_s, 2),
        "ls_rps": config.base.ls_rate,
    }


# -- one run ---------------------------------------------------------------------------------------


def latency_timeline(
    done: Sequence[tuple[float, float]], origin: float, target: float
) -> list[dict[str, float]]:
    """Per second of result time since ``origin``: results, p50 and p99 in ms, and the share in target
    (the plot's latency panel, small enough for the JSON)."""
    bins: dict[int, list[float]] = {}
    for at, latency in done:
        bins.setdefault(math.floor(at - origin), []).append(latency)
    rows = []
    for second in sorted(bins):
        values = bins[second]
        rows.append(
            {
                "t": float(second),
                "n": len(values),
                "p50_ms": round((sample_quantile(values, 0.5) or 0.0) * 1000, 1),
                "p99_ms": round((sample_quantile(values, 0.99) or 0.0) * 1000, 1),
                "met": round(sum(1 for v in values if v <= target) / len(values), 3),
            }
        )
    return rows


@contextmanager
def producers_of(settings: KafkaSettings, config: DirigoConfig) -> Iterator[dict[str, Any]]:
    """One producer per tenant (as S1: a tenant's records do not queue behind another's bursts)."""
    lingers = {"LS": config.base.ls_linger_ms, "BA": config.base.ba_linger_ms, "IO": config.io_linger_ms}
    made = {
        tenant: make_producer(settings, **{"enable.idempotence": False, "acks": "1", "linger.ms": linger})[0]
        for tenant, linger in lingers.items()
    }
    try:
        yield made
    finally:
        for producer in made.values():
            producer.flush(10)


def wait_ready(
    process: Any, reader: OutputReader, producers: Mapping[str, Any], topics: DirigoTopics, where: str
) -> None:
    """Probe BA and IO until each has a result: the group joined and every pipeline runs."""
    deadline = time.monotonic() + 120
    probe = 0
    while not (reader.by_tenant["BA"] and reader.by_tenant["IO"]):
        if process.poll() is not None:
            raise RuntimeError(f"the worker exited with {process.returncode}; see {where}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"the worker produced nothing within 120 s; see {where}")
        probe += 1
        value = json.dumps({"id": -probe, "payload": "probe", "ts": time.time()}).encode()
        for tenant, topic in (("BA", topics.ba_in), ("IO", topics.io_in)):
            if not reader.by_tenant[tenant]:
                producers[tenant].produce(topic, value, f"probe{probe}".encode())
                producers[tenant].poll(0)
        time.sleep(0.25)


def run_system(  # noqa: PLR0917
    name: str,
    settings: KafkaSettings,
    config: DirigoConfig,
    capacity: Capacity,
    repetition: int,
    out: Path,
    progress: Progress,
    broker_pid: int | None,
) -> dict[str, Any]:
    """One system's run: warm-up, a measured phase of bursts, the drain; what its outputs and the
    worker's /metrics say."""
    system, base = SYSTEMS[name], config.base
    run = f"{name}-{repetition}-{uuid.uuid4().hex[:6]}"
    topics = DirigoTopics.fresh(run)
    ensure_topics(make_admin(settings), topics.specs(base.partitions))
    ba_rate = config.base.load * capacity.ba_rps
    warm = plan_phase(
        config,
        ba_rate,
        base.warmup,
        bursts=False,
        seed=base.seed + 1000 + repetition,
        first_id=WARMUP_FIRST_ID,
    )
    measured = plan_phase(config, ba_rate, base.duration, bursts=True, seed=base.seed + repetition)
    reader = OutputReader(settings, topics, base.partitions)
    port = free_port()
    log = out / "logs" / f"{run}.log"
    sampler: LeaseSampler | None = None
    with ExitStack() as stack:
        stack.callback(reader.close)
        producers = stack.enter_context(producers_of(settings, config))
        process = stack.enter_context(
            system_process(
                system.policy,
                settings,
                topics,
                run,
                base,
                capacity.iterations,
                out / "logs",
                port,
                pipelines=PIPELINES_MODULE,
                extra_env=worker_env(system, config, topics),
            )
        )
        wait_ready(process, reader, producers, topics, str(log))
        sampler = LeaseSampler(port, config.sample_interval)
        stack.callback(sampler.close)
        progress(f"  {name}: running; warm-up {base.warmup:.0f} s")
        send_phase(producers, topics, warm, time.time())
        at_start = scrape(port)
        cpu_start = CpuSample.take(process.pid, broker_pid, children=True)
        phase_start = time.time()
        progress(f"  {name}: measuring {base.duration:.0f} s of bursty input")
        stamped = send_phase(producers, topics, measured, phase_start)
        expected = expectations([s for s in stamped if s[0].tenant != "IO"], phase_start)
        io_expected = {int(send.value["id"]): ts for send, ts in stamped if send.tenant == "IO"}

        def done() -> bool:
            got = {t: {int(o.value.get("id", -1)) for o in reader.by_tenant[t]} for t in ("BA", "IO")}
            windows = {(o.value.get("key"), float(o.value.get("window_start", -1))) for o in reader.ls}
            return (
                set(expected.ba_ids) <= got["BA"]
                and set(io_expected) <= got["IO"]
                and set(expected.ls_windows) <= windows
            )

        drain_until = time.monotonic() + base.drain
        while not done() and time.monotonic() < drain_until:
            time.sleep(0.25)
        phase_end = time.time()
        cpu = CpuSample.take(process.pid, broker_pid, children=True).since(cpu_start)
        at_end = scrape(port)
    result = measure(
        name,
        base,
        expected,
        reader,
        phase_start,
        phase_end,
        capacity,
        # BA's run time on the loop is its capacity only where the loop runs every call.
        ba_run_s=mean_run_seconds(at_start, at_end, "BA") if at_end and system.lessees == "off" else None,
    )
    seconds = phase_end - phase_start
    io_done, io_latencies = job_results(reader.by_tenant["IO"], io_expected)
    result["IO"] = tenant_stats(io_latencies, len(io_expected), config.io_target, len(io_latencies), seconds)
    ls_done = window_results(reader.ls, expected.ls_windows).done
    ba_done, ba_latencies = job_results(reader.ba, expected.ba_ids)
    done_by_tenant = {
        "LS": ls_done,
        "BA": list(zip(ba_done, ba_latencies, strict=True)),
        "IO": list(zip(io_done, io_latencies, strict=True)),
    }
    targets = {"LS": base.ls_target, "BA": base.ba_target, "IO": config.io_target}
    usage = lessee_usage(at_start, at_end)
    runs_s = run_seconds(at_start, at_end)
    step_cpu = {
        t: _stamped_cpu_s(reader.by_tenant[t], ids)
        for t, ids in (("BA", expected.ba_ids), ("IO", io_expected))
    }
    input_s = {t: _input_seconds(stamped, t, phase_start) for t in TENANTS}
    sent = {t: sum(1 for send, _ in stamped if send.tenant == t) for t in TENANTS}
    for tenant in TENANTS:
        row = result[tenant]
        row["timeline"] = latency_timeline(done_by_tenant[tenant], phase_start, targets[tenant])
        row["run_s"] = runs_s.get(tenant, 0.0) if at_end else None
        row["cpu_s"] = step_cpu.get(tenant, row["run_s"])
        row.update(usage[tenant])
        row["input_rps"] = round(sent[tenant] / input_s[tenant], 1) if input_s[tenant] > 0 else None
    result["BA"]["load"] = {
        **result.pop("load"),
        "mean_input_load": round(sent["BA"] / input_s["BA"] / capacity.ba_rps, 3)
        if input_s["BA"] > 0
        else None,
    }
    result["LS"]["load"] = {"requested_rps": base.ls_rate, "input_rps": result["LS"]["input_rps"]}
    io_rps = result["IO"]["input_rps"]
    result["IO"]["load"] = {
        "requested_rps": config.io_rate,
        "input_rps": io_rps,
        "in_flight": None if io_rps is None else round(io_rps * config.io_sleep_s, 2),
    }
    known = [result[t]["lessee_s"] for t in TENANTS]
    result["lessee_s"] = (
        None if any(v is None for v in known) else round(sum(v for v in known if v is not None), 3)
    )
    result["leases"] = sampler.timeline(phase_start) if sampler is not None else {"t": [], "steps": {}}
    result["cpu"] = cpu
    result["kafka_requests"] = kafka_requests(at_start, at_end) if at_end else {}
    result["stalls"] = loop_stalls(at_start, at_end) if at_end else {}
    result["broker_cores"] = _per_wall(cpu["broker_s"], cpu["wall_s"])
    result["worker_cores"] = _per_wall(cpu["system_s"], cpu["wall_s"])
    result["steps"] = step_env(system, config)
    broker = "-" if result["broker_cores"] is None else f"{result['broker_cores']:.2f}"
    lessees = "not exported" if result["lessee_s"] is None else f"{result['lessee_s']:.1f} s"
    progress(
        f"  {name}: worker and its lessees {result['worker_cores'] or 0:.2f} cores, broker {broker} cores "
        f"while measured ({cpu['wall_s']:.0f} s); lessee-seconds {lessees}"
    )
    said = [
        f"{t} {percent_text(result[t]['deadline_met_ratio'])} (p99 {ms_text(result[t]['p99_ms'])} ms)"
        for t in TENANTS
    ]
    progress(f"  {name}: in target: {', '.join(said)}")
    stalls = [f"{phase} {n['stalls']:.0f} ({n['seconds']:.2f} s)" for phase, n in result["stalls"].items()]
    progress(f"  {name}: stalls of the worker's loop while measured: {', '.join(stalls) or 'none'}")
    return result


def _stamped_cpu_s(outputs: Sequence[Output], sent_at: dict[int, float]) -> float:
    """The thread CPU the map's calls for the measured jobs took, as stamped on their outputs."""
    return round(
        sum(float(out.value.get("cpu_ms", 0.0)) for out, _ in matched_jobs(outputs, sent_at)) / 1000, 3
    )


def _input_seconds(stamped: Sequence[tuple[Send, float]], tenant: str, start: float) -> float:
    times = [ts for send, ts in stamped if send.tenant == tenant]
    return max(times, default=start) - start


def _per_wall(seconds: float | None, wall: float | None) -> float | None:
    return None if seconds is None or not wall else round(seconds / wall, 3)


# -- the whole benchmark ---------------------------------------------------------------------------


def phase_order(systems: Sequence[str], repetitions: int) -> list[tuple[str, int]]:
    """S1's rotation: repetition r starts at the r-th system, so none always runs first."""
    order: list[tuple[str, int]] = []
    for repetition in range(repetitions):
        shift = repetition % len(systems)
        order.extend((name, repetition) for name in (*systems[shift:], *systems[:shift]))
    return order


def run_benchmark(
    out: Path,
    *,
    quick: bool = False,
    repetitions: int | None = None,
    systems: Sequence[str] | None = None,
    bootstrap: str | None = None,
    config: DirigoConfig | None = None,
    progress: Progress = print,
) -> dict[str, Any]:
    """Calibrate one process's BA capacity, then run each system; write dirigo.json and dirigo.png."""
    if config is None:
        overrides: dict[str, Any] = {}
        if systems is not None:
            overrides["systems"] = tuple(systems)
        if repetitions is not None:
            overrides["repetitions"] = repetitions
        config = quick_config(**overrides) if quick else DirigoConfig(**overrides)
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    base = config.base
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in config.systems}
    with ExitStack() as stack:
        shared = None if not bootstrap else stack.enter_context(broker_with_pid(bootstrap))
        with run_broker(shared) as (settings, _):
            capacity = calibrate(settings, base, out / "logs", progress)
        rates = planned_rates(config, capacity)
        progress(
            f"input: LS {base.ls_rate:g}/s, BA {rates['ba_mean_rps']:,.0f}/s mean in bursts of "
            f"{rates['ba_burst_rps']:,.0f}/s (load {base.load:g}, {rates['ba_cpu_cores']:.2f} cores of "
            f"{base.ba_cost_ms:g} ms jobs), IO {config.io_rate:g}/s of {config.io_sleep_s * 1000:g} ms "
            f"({rates['io_in_flight']:g} in flight)"
        )
        phases = phase_order(config.systems, config.repetitions)
        for index, (name, repetition) in enumerate(phases, 1):
            progress(
                f"phase {index}/{len(phases)}: {name} (repetition {repetition + 1}/{config.repetitions})"
            )
            try:
                with run_broker(shared) as (settings, pid):
                    entry = run_system(name, settings, config, capacity, repetition, out, progress, pid)
                entry["phase"] = index
                runs[name].append(entry)
            except Exception as exc:  # one system failing must not lose the others' results
                progress(f"  {name} failed: {exc}")
    summary = {name: summarise(entries) for name, entries in runs.items() if entries}
    broker = [
        e["broker_cores"] for entries in runs.values() for e in entries if e.get("broker_cores") is not None
    ]
    result: dict[str, Any] = {
        "benchmark": "s6_dirigo",
        "systems": summary,
        "broker_cores": {
            "median": median_known(broker),
            "max": max(broker, default=None),
            "goal": 0.2,
        },
        "calibration": asdict(capacity),
        "rates": rates,
        "config": {**asdict(config), "systems_spec": {n: asdict(SYSTEMS[n]) for n in config.systems}},
        **machine_and_commit(),
    }
    result["targets"] = check_targets(result)
    write_result(out, "dirigo.json", {**result, "runs": strip_latencies(runs, TENANTS)})
    if plot(result, runs, out / "dirigo.png"):
        progress(f"wrote {out / 'dirigo.png'}")
    return result


def parse_systems(text: str) -> tuple[str, ...]:
    """``--systems``: known names, comma-separated; a ``ValueError`` naming the unknown ones."""
    chosen = tuple(s.strip() for s in text.split(",") if s.strip())
    unknown = sorted(set(chosen) - set(SYSTEMS))
    if unknown or not chosen:
        raise ValueError(f"unknown systems {unknown or list(chosen)}; choose from {', '.join(SYSTEMS)}")
    return chosen


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--quick", action="store_true", help="one repetition of 20 s per system")
    parser.add_argument("--repetitions", type=int, default=None, help="default: 3 (1 with --quick)")
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--bootstrap", default=None, help="host:port of a broker (default: embedded ones)")
    args = parser.parse_args(argv)
    try:
        systems = parse_systems(args.systems)
        if args.repetitions is not None and args.repetitions < 1:
            raise ValueError(f"--repetitions must be at least 1, got {args.repetitions}")
    except ValueError as exc:
        raise SystemExit(str(exc)) from None
    result = run_benchmark(
        args.out, quick=args.quick, repetitions=args.repetitions, systems=systems, bootstrap=args.bootstrap
    )
    print(format_table(result))


if __name__ == "__main__":
    main()
