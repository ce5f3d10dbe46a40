"""S1: two tenants on one worker process under Pareto bursts; one run per scheduling policy (or peer).

- **LS** (latency-sensitive): clicks at a steady rate -> filter -> key_by -> 1 s tumbling count, with
  a tight target after the window closes (``ls_target``).
- **BA** (bulk): jobs with a CPU cost each (:mod:`cadenza.demo.cpu_work`: a calibrated count of rounds,
  or a fixed CPU time), arriving in bursts of Pareto-distributed size (seeded), with a loose target
  (``ba_target``).

Two sizings give the same load (``SIZINGS``): ``light``, many 1 ms jobs, and ``heavy``, a fifth as
many 5 ms jobs, so the embedded broker takes a small share of the machine.

BA's mean rate is ``load`` (about 0.75) of the BA capacity the worker has beside LS's live traffic,
measured first on this machine with this process sending and reading as in the runs (``calibrate``);
inside a burst the input rate is ``burst_peak`` times the mean, so bursts exceed
capacity for seconds. Every system gets the same records (same seed, same send times; each record's
``ts`` is its actual send time) on fresh topics of the same broker, one system at a time:
cadenza's ``cadenza worker`` under each policy, and any peer system whose command a caller passes
in ``peers`` (the checkout's ``benchmarks/scenarios/bench_s1.py`` adds a faust-streaming app doing
the same two pipelines in its own venv). The harness ships in the package because ``cadenza demo`` runs it.

What is measured, from the outputs alone (so every system is judged the same way):

- LS latency of a result = its Kafka timestamp (CreateTime, set by the system's producer) minus its
  window's end; BA latency = output timestamp minus the job's ``ts``;
- ``deadline_met_ratio`` = results within target / results expected (a missing result is a miss),
  where LS expects one result per (user, window) that the measured input fills (windows that close
  after the input ends are not expected: nothing would close them);
- ``throughput_rps`` = input records of the tenant whose results arrived, per second of the run;
- ``load``: the BA load each phase actually ran at, and whether it was more than 10% off the load
  asked for (``actual_load``);
- latency percentiles over the results that arrived. Records sent during the warm-up (which also
  covers group joins) are not counted. Completion is judged by counting outputs; a system that has
  not delivered everything within ``drain`` seconds after the input ends is stopped and its missing
  results count as misses.

``cadenza demo`` runs four short phases of the heavy sizing, fifo, cameo, cameo, fifo
(``demo_config``), and judges each policy over its phases at the load asked for
(:mod:`cadenza.demo.phases`); ``cadenza bench s1`` (from a checkout) runs every policy and faust.
"""

from __future__ import annotations

import json
import math
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from cadenza.demo.cpu_work import burn
from cadenza.demo.machine import machine_and_commit, machine_busy_seconds, process_cpu_seconds, write_result
from cadenza.demo.worker_metrics import (
    STAGES,
    kafka_requests,
    loop_stalls,
    mean_run_seconds,
    planned_hops,
    scheduler_queue_wait,
    scrape,
    stage_buckets,
    stage_percentiles,
)
from cadenza.infra.broker.embedded import EmbeddedBroker
from cadenza.infra.kafka.clients import make_admin, make_consumer, make_producer
from cadenza.infra.kafka.topics import TopicSpec, ensure_topics
from cadenza.loadgen import Bursts
from cadenza.settings import KafkaSettings

POLICIES = ("fifo", "edf", "sjf", "cameo", "fair")
TENANTS = ("LS", "BA")
#: Partitions of every S1 topic unless a sizing says otherwise.
PARTITIONS = 4
#: BA ids of warm-up jobs start here, far above any measured phase's (which start at 0).
WARMUP_FIRST_ID = 1_000_000_000
#: The pipelines module every cadenza worker of S1 runs (an importable name: works from a wheel too).
PIPELINES_MODULE = "cadenza.demo.s1_pipelines"
Progress = Callable[[str], None]


@dataclass(frozen=True)
class S1Config:
    duration: float = 40.0
    warmup: float = 8.0
    drain: float = 20.0
    repetitions: int = 3
    load: float = 0.75
    ls_rate: float = 300.0
    users: int = 40
    health_share: float = 0.05
    ba_cost_ms: float = 1.0
    #: What a BA job's cost is counted in: ``iterations`` of ``burn``, calibrated once to ``ba_cost_ms``
    #: (the cost then moves with the host's speed, as any real code's does), or ``cpu``: ``burn_cpu``
    #: for ``ba_cost_ms`` of the worker thread's CPU time, the same cost whatever the host's speed.
    ba_cost_kind: str = "iterations"
    #: Partitions of each topic (inputs, outputs, the worker's repartition topic).
    partitions: int = PARTITIONS
    #: How long the LS tenant's producer lingers: a few ms batch the clicks of a moment into one
    #: request, which the embedded broker pays for more than for records.
    ls_linger_ms: float = 2.0
    #: How long the BA tenant's producer lingers to batch its jobs (its target is seconds): fewer
    #: produce requests and record batches for the broker to hold and serve.
    ba_linger_ms: float = 2.0
    #: Measure LS alone on a backlog first: only a check that LS leaves room for BA, skipped where
    #: LS is plainly a small share (the demo's 100 clicks/s against about 17,000/s).
    calibrate_ls: bool = True
    burst_alpha: float = 1.5
    burst_mean_s: float = 2.0
    burst_max_s: float = 6.0
    burst_peak: float = 4.0
    ls_target: float = 0.3
    ba_target: float = 5.0
    seed: int = 7
    #: Scheduling policies of cadenza workers, or names of peer systems passed to ``run_benchmark``.
    systems: tuple[str, ...] = POLICIES
    #: Where cadenza workers send sampled spans (for the stats job), or None.
    spans_topic: str | None = None
    span_sample_ratio: float = 0.05
    #: The cadenza workers' --metrics-port (None: a free one per run); `cadenza demo`'s dashboard scrapes it.
    metrics_port: int | None = None
    #: Without an external broker: a fresh embedded broker for the calibration and for every run. The
    #: embedded broker keeps every record in memory and its CPU per request grows with what it holds,
    #: so on one broker for all runs the later runs (and not the calibration) share the cores with a
    #: busier broker.
    broker_per_run: bool = True
    #: The name of the preset (``SIZINGS``) the record sizes came from, kept in the JSON so that a
    #: table can say which sizing it used.
    sizing: str = "light"
    #: ``rotate``: repetition r starts at the r-th system (S1's order); ``mirrored``: odd repetitions
    #: run the systems in reverse (fifo, cameo, cameo, fifo), so no policy always meets the machine
    #: and the broker later than the other.
    order: str = "rotate"
    #: Seconds of the BA calibration's output skipped (its first batches come out faster than it then
    #: keeps up), then measured.
    calibration_skip: float = 8.0
    calibration_measure: float = 12.0

    def __post_init__(self) -> None:
        if self.order not in ORDERS:
            raise ValueError(f"unknown S1 order {self.order!r}; choose from {', '.join(ORDERS)}")
        if self.ba_cost_kind not in COST_KINDS:
            kinds = ", ".join(COST_KINDS)
            raise ValueError(f"unknown BA cost kind {self.ba_cost_kind!r}; choose from {kinds}")


#: The same CPU load on the worker from records of two sizes. ``light``: BA jobs of 1 ms at about
#: 650/s beside 300 LS clicks/s (S1 as measured until 2026-12-05); the embedded broker then takes
#: 0.4-0.6 of a core of the two, and its cost moves the capacity left for the worker. ``heavy``: BA
#: jobs of 5 ms of CPU time (``ba_cost_kind="cpu"``) at a fifth of that rate, LS at 100/s over 20
#: users (still about 5 clicks per user and window), 2 partitions a topic, the tenants' producers
#: lingering 25 ms (LS) and 50 ms (BA): a quarter of the records in fewer requests, which the
#: embedded broker pays for more than for records. Its CPU under cameo went 0.19-0.20 of a core with
#: 10/20 ms lingers, 0.13-0.14 with these (2026-12-06); cameo's LS p99 stayed 130-170 ms.
SIZINGS: dict[str, dict[str, Any]] = {
    "light": {},
    "heavy": {
        "ba_cost_ms": 5.0,
        "ba_cost_kind": "cpu",
        "ls_rate": 100.0,
        "users": 20,
        "partitions": 2,
        "ls_linger_ms": 25.0,
        "ba_linger_ms": 50.0,
    },
}
ORDERS = ("rotate", "mirrored")
COST_KINDS = ("iterations", "cpu")


def sized(sizing: str, **overrides: Any) -> S1Config:
    """An ``S1Config`` of the preset ``sizing`` (``SIZINGS``), with ``overrides`` on top."""
    if sizing not in SIZINGS:
        raise ValueError(f"unknown S1 sizing {sizing!r}; choose from {', '.join(SIZINGS)}")
    return S1Config(**{**SIZINGS[sizing], **overrides, "sizing": sizing})


def phase_order(config: S1Config) -> list[tuple[str, int]]:
    """The (system, repetition) of every phase, in the order they run (see ``S1Config.order``)."""
    systems = list(config.systems)
    phases: list[tuple[str, int]] = []
    for repetition in range(config.repetitions):
        if config.order == "mirrored":
            order = systems if repetition % 2 == 0 else systems[::-1]
        else:
            shift = repetition % len(systems)
            order = systems[shift:] + systems[:shift]
        phases.extend((system, repetition) for system in order)
    return phases


#: The ``--load`` range: below it the bursts hardly queue; above it BA's backlog outgrows the drain.
LOAD_RANGE = (0.05, 3.0)


def check_load(load: float) -> float:
    """``load`` if it is a sensible BA load, else a ``ValueError`` saying the range."""
    low, high = LOAD_RANGE
    if not math.isfinite(load) or not low <= load <= high:
        raise ValueError(
            f"--load {load:g} is outside {low:g}..{high:g} (BA's mean input as a fraction of its capacity)"
        )
    return load


def quick_config(sizing: str = "light", **overrides: Any) -> S1Config:
    """One repetition of 20 s: a few minutes for all six systems on 2 cores."""
    return sized(sizing, **{"duration": 20.0, "warmup": 6.0, "drain": 15.0, "repetitions": 1, **overrides})


def demo_config(**overrides: Any) -> S1Config:
    """``cadenza demo``: heavy records, fifo and cameo in mirrored order (fifo, cameo, cameo, fifo),
    each phase 12 s of bursts: about two minutes with the calibration on 2 cores."""
    return sized(
        "heavy",
        **{
            "systems": ("fifo", "cameo"),
            "order": "mirrored",
            "repetitions": 2,
            "duration": 12.0,
            "warmup": 4.0,
            "drain": 10.0,
            "calibration_skip": 4.0,
            "calibration_measure": 8.0,
            "calibrate_ls": False,
            "broker_per_run": False,
            **overrides,
        },
    )


# -- calibration ---------------------------------------------------------------------------------------


def burn_iterations(cost_ms: float, *, probes: int = 5) -> int:
    """Iterations of ``burn`` that take about ``cost_ms`` here (the median of ``probes`` timings of
    about a millisecond each)."""
    probe = 2000
    timings = []
    for _ in range(probes):
        started = time.perf_counter()
        burn("calibration", probe)
        timings.append(time.perf_counter() - started)
    per_iteration = statistics.median(timings) / probe
    return max(1, round(cost_ms / 1000.0 / per_iteration))


@dataclass
class Capacity:
    #: LS alone, on a backlog (None: not measured, ``S1Config.calibrate_ls``).
    ls_rps: float | None
    #: BA fed live beyond what it can run, while LS arrives live at ``ls_rate`` (this process sends and
    #: reads, as in the measured runs): what the worker has left for BA in the benchmark's conditions.
    ba_rps: float
    iterations: int
    #: LS records/s the calibration's worker ran while BA's capacity was measured: about ``ls_rate``
    #: when LS was served in full, as it must be for ``ba_rps`` to mean what is left beside it.
    ls_beside_ba_rps: float = 0.0
    #: BA's mean seconds per job while ``ba_rps`` was measured (``mean_run_seconds``): a phase whose
    #: jobs took longer had less capacity, in that proportion.
    ba_run_s: float | None = None
    #: The host's speed at calibration (``machine_speed``), the reference of each phase's speed check.
    speed_iterations: int = 1

    def ba_rate(self, config: S1Config) -> float:
        """The BA mean rate at ``config.load`` of the BA capacity left beside live LS traffic.

        An earlier version measured BA alone on an idle machine and subtracted LS's share; with the
        load generator and reader on the same 2 cores the worker then sustained less than planned, and
        a full run came out overloaded under every policy.
        """
        if self.ls_rps is not None and config.ls_rate / self.ls_rps > 0.5:
            raise SystemExit(
                f"LS alone at {config.ls_rate:g}/s uses {config.ls_rate / self.ls_rps:.0%} of the worker; "
                "lower --ls-rate"
            )
        return config.load * self.ba_rps


# -- the input -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Send:
    at: float  # seconds after the phase starts
    tenant: str  # "LS" or "BA"
    key: str
    value: dict[str, Any]  # without "ts": stamped at send time


def plan(
    config: S1Config, ba_rate: float, duration: float, *, bursts: bool, seed: int, first_id: int = 0
) -> list[Send]:
    """The records of one phase in send order: LS steady, BA in Pareto bursts (or steady).

    BA job ids start at ``first_id``: the warm-up and the measured phase of one run must not share
    ids, or the measurement matches a measured job with the warm-up's output of the same id (an
    earlier version did: about a fifth of BA's latencies came out negative, under every system).
    """
    rng = random.Random(f"s1:{seed}:values")
    sends: list[Send] = []
    for i in range(int(duration * config.ls_rate)):
        user = f"u{rng.randrange(config.users)}"
        page = "/health" if rng.random() < config.health_share else f"/p{rng.randrange(8)}"
        sends.append(Send(i / config.ls_rate, "LS", user, {"user": user, "page": page}))
    times_rng = random.Random(f"s1:{seed}:bursts")
    ba_times: list[float] = []
    if bursts:
        shape = Bursts(
            alpha=config.burst_alpha,
            mean_seconds=config.burst_mean_s,
            peak=config.burst_peak,
            max_seconds=config.burst_max_s,
        )
        start = 0
        for size in shape.sizes(times_rng, ba_rate):
            for offset in range(size):
                ba_times.append(start / ba_rate + offset / (config.burst_peak * ba_rate))
            start += size
            if start / ba_rate >= duration:
                break
    else:
        ba_times = [i / ba_rate for i in range(int(duration * ba_rate))]
    for index, at in enumerate(t for t in ba_times if t < duration):
        job = first_id + index
        sends.append(Send(at, "BA", f"j{job}", {"id": job, "payload": f"job-{seed}-{job}"}))
    sends.sort(key=lambda send: send.at)
    return sends


# -- one system ------------------------------------------------------------------------------------------


@dataclass
class Topics:
    ls_in: str
    ls_out: str
    ba_in: str
    ba_out: str

    @classmethod
    def fresh(cls, run: str) -> Topics:
        return cls(f"s1-{run}-ls-in", f"s1-{run}-ls-out", f"s1-{run}-ba-in", f"s1-{run}-ba-out")

    def specs(self, partitions: int) -> list[TopicSpec]:
        return [TopicSpec(name, partitions) for name in asdict(self).values()]


@dataclass
class Output:
    value: dict[str, Any]
    timestamp: float


class Outputs(Protocol):
    """What :func:`measure` reads: the outputs of each tenant, in arrival order."""

    ls: list[Output]
    ba: list[Output]


class OutputReader:
    """Reads both output topics from the beginning in a thread, as the system writes them."""

    def __init__(self, settings: KafkaSettings, topics: Topics, partitions: int) -> None:
        self.topics = topics
        self.ls: list[Output] = []
        self.ba: list[Output] = []
        self._stop = threading.Event()
        self._consumer, self._errors = make_consumer(settings, f"s1-reader-{uuid.uuid4().hex[:8]}")
        self._consumer.assign(
            [
                TopicPartition(topic, partition, OFFSET_BEGINNING)
                for topic in (topics.ls_out, topics.ba_out)
                for partition in range(partitions)
            ]
        )
        self._thread = threading.Thread(target=self._run, name="s1-reader", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for message in self._consumer.consume(1000, 0.1):
                if message.error() is not None:
                    continue
                try:
                    value = json.loads(message.value() or b"null")
                except ValueError:
                    continue
                out = Output(value, message.timestamp()[1] / 1000.0)
                (self.ls if message.topic() == self.topics.ls_out else self.ba).append(out)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._consumer.close()


@dataclass(frozen=True)
class PeerRun:
    """What a peer system's command needs to run S1's two pipelines like the cadenza worker does."""

    settings: KafkaSettings
    topics: Topics
    run: str
    iterations: int
    workdir: Path
    #: Seconds of CPU per BA job (``burn_cpu``) where the config counts cost in CPU time, else None.
    cpu_seconds: float | None = None
    #: Partitions of the run's topics (and of any topic the peer creates for its own repartitioning).
    partitions: int = PARTITIONS


#: Builds the command line of a peer system (e.g. faust) for one run; it must read ``topics``' inputs
#: and write their outputs as the cadenza pipelines do, and stop on SIGTERM.
PeerCommand = Callable[[PeerRun], list[str]]


@contextmanager
def system_process(  # noqa: PLR0917 - one call site, names in the signature
    system: str,
    settings: KafkaSettings,
    topics: Topics,
    run: str,
    config: S1Config,
    iterations: int,
    logs: Path,
    metrics_port: int | None = None,
    peer: PeerCommand | None = None,
) -> Iterator[subprocess.Popen[bytes]]:
    """A process running S1: ``peer``'s command if given, else a cadenza worker under policy ``system``."""
    logs.mkdir(parents=True, exist_ok=True)
    log = (logs / f"{run}.log").open("wb")
    env = {**os.environ, "CADENZA_BOOTSTRAP_SERVERS": settings.bootstrap_servers}
    if peer is not None:
        cpu_seconds = config.ba_cost_ms / 1000.0 if config.ba_cost_kind == "cpu" else None
        workdir = logs / f"{run}-{system}"
        command = peer(PeerRun(settings, topics, run, iterations, workdir, cpu_seconds, config.partitions))
    else:
        env.update(
            S1_RUN=run,
            S1_LS_IN=topics.ls_in,
            S1_LS_OUT=topics.ls_out,
            S1_BA_IN=topics.ba_in,
            S1_BA_OUT=topics.ba_out,
            S1_LS_TARGET=str(config.ls_target),
            S1_BA_TARGET=str(config.ba_target),
            S1_CPU_ITERATIONS=str(iterations),
        )
        if config.ba_cost_kind == "cpu":
            env["S1_CPU_SECONDS"] = str(config.ba_cost_ms / 1000.0)
        command = [
            sys.executable,
            "-m",
            "cadenza",
            "worker",
            PIPELINES_MODULE,
            "--policy",
            system,
            "--group",
            f"s1-{run}",
            "--partitions",
            str(config.partitions),
        ]
        if metrics_port is not None:
            command += ["--metrics-port", str(metrics_port)]
        if config.spans_topic is not None and not run.startswith("cal-"):  # not the calibration runs
            command += [
                "--spans-topic",
                config.spans_topic,
                "--span-sample-ratio",
                str(config.span_sample_ratio),
            ]
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=logs)
    try:
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)
        log.close()


def send_phase(
    producers: Mapping[str, Any], topics: Topics, sends: Sequence[Send], started: float
) -> list[tuple[Send, float]]:
    """Produce ``sends`` on schedule, each tenant through its own producer (``producers[tenant]``);
    return each with the ``ts`` it was stamped with.

    One producer per tenant, as two tenants' applications would have: through one producer, LS's
    records would queue behind BA's bursts in its buffer and on its connection to the broker,
    first come first served before any system under test sees them.
    """
    stamped: list[tuple[Send, float]] = []
    for send in sends:
        delay = started + send.at - time.time()
        if delay > 0.0005:
            time.sleep(delay)
        ts = time.time()
        topic = topics.ls_in if send.tenant == "LS" else topics.ba_in
        producer = producers[send.tenant]
        value = json.dumps({**send.value, "ts": ts}).encode()
        while True:
            try:
                producer.produce(topic, value, send.key.encode())
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
        stamped.append((send, ts))
    for producer in producers.values():
        producer.flush(30)
    return stamped


def percentile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))
    return ordered[index]


#: A phase whose BA capacity differed from the calibrated one by more than this share is marked
#: ``off_load``: the load it ran at (the requested one, on the capacity it had) was more than 10% off
#: the load asked for, because other processes took cores, the host's speed moved, or the policy's
#: own cost per record took capacity. Its figures are then not a result of the policy.
LOAD_TOLERANCE = 0.10
#: BA is taken as running flat out while this many seconds of its calibrated capacity were waiting.
#: Not less: a job sent is fetchable only 0.2-1 s later on the embedded broker (the worker's fetch
#: stage), so at 0.25 s the first moments of a burst counted as busy while the worker still idled,
#: and phases read 10-20% below the capacity they had (a heavy-sizing phase: 154/s at 0.25 s, 184/s
#: at 0.75 s, 182/s calibrated; 2026-12-06).
SATURATED_BACKLOG_S = 0.75


def sustained_rate(
    sent: Sequence[float],
    done: Sequence[float],
    backlog: float,
    *,
    bin_s: float = 0.1,
    min_busy_s: float = 1.0,
) -> float | None:
    """Results per second while at least ``backlog`` jobs were waiting: what the system could run.

    ``sent`` and ``done`` are the send times and result times of one tenant's jobs. A time bin counts
    as busy when the backlog (sent minus done so far) is at least ``backlog`` at both of its edges, so
    the system had work queued for the whole bin and its output rate there is its capacity, not the
    input rate. None if fewer than ``min_busy_s`` seconds were busy (no burst ever exceeded capacity).
    """
    if not sent or not done or bin_s <= 0:
        return None
    sends, dones = sorted(sent), sorted(done)
    start, end = sends[0], max(sends[-1], dones[-1])
    edges = max(0, math.floor((end - start) / bin_s)) + 1
    busy_bins = 0
    finished = 0
    s_index = d_index = 0
    prev_backlog = None
    prev_done = 0
    for step in range(edges):
        edge = start + step * bin_s
        while s_index < len(sends) and sends[s_index] <= edge:
            s_index += 1
        while d_index < len(dones) and dones[d_index] <= edge:
            d_index += 1
        current = s_index - d_index
        if prev_backlog is not None and prev_backlog >= backlog and current >= backlog:
            busy_bins += 1
            finished += d_index - prev_done
        prev_backlog, prev_done = current, d_index
    if busy_bins * bin_s < min_busy_s:
        return None
    return finished / (busy_bins * bin_s)


def actual_load(  # noqa: PLR0917
    requested: float,
    input_rps: float,
    sustained_rps: float | None,
    calibrated_rps: float,
    run_s: float | None = None,
    calibrated_run_s: float | None = None,
) -> dict[str, Any]:
    """The load a phase ran at, and whether it was more than ``LOAD_TOLERANCE`` off the load asked for.

    ``actual`` is the requested load on the capacity the phase had. Where BA's mean seconds per job
    are known for the phase (``run_s``) and the calibration (``calibrated_run_s``), the capacity
    moved in their proportion: averaged over every job, this is precise, and it counts what the
    machine did (its speed, cores taken by other processes), not the policy. Otherwise it is the
    calibrated capacity over the one BA sustained during bursts (``output_load``, from the outputs
    alone, as for a peer system; it reads a few percent either way from phase to phase).

    It is judged on capacity, not on the input: a short phase's Pareto bursts bring more or less
    than the mean input, which is the input's doing (the same for every policy), not the
    machine's; that ratio is ``input_load``.
    """
    output_load = None if not sustained_rps else requested * calibrated_rps / sustained_rps
    run_load = requested * run_s / calibrated_run_s if run_s and calibrated_run_s else None
    actual = run_load if run_load is not None else output_load
    return {
        "requested": requested,
        "ba_input_rps": round(input_rps, 1),
        "ba_sustained_rps": None if sustained_rps is None else round(sustained_rps, 1),
        "ba_calibrated_rps": round(calibrated_rps, 1),
        "ba_run_ms": None if run_s is None else round(run_s * 1000, 3),
        "ba_calibrated_run_ms": None if calibrated_run_s is None else round(calibrated_run_s * 1000, 3),
        "actual": None if actual is None else round(actual, 3),
        "output_load": None if output_load is None else round(output_load, 3),
        "input_load": None if not sustained_rps else round(input_rps / sustained_rps, 3),
        "off_load": actual is not None and abs(actual / requested - 1.0) > LOAD_TOLERANCE,
    }


def tenant_stats(  # noqa: PLR0917
    latencies: list[float], expected: int, target: float, records: int, seconds: float, wrong: int = 0
) -> dict[str, Any]:
    """``latencies`` of correct results only; ``wrong`` results (a window count that misses records)
    count neither as met nor in the percentiles."""
    met = sum(1 for latency in latencies if latency <= target)
    return {
        "met": met,
        "p50_ms": _ms(percentile(latencies, 0.50)),
        "p95_ms": _ms(percentile(latencies, 0.95)),
        "p99_ms": _ms(percentile(latencies, 0.99)),
        "deadline_met_ratio": round(met / expected, 4) if expected else None,
        "throughput_rps": round(records / seconds, 1) if seconds > 0 else None,
        "records": records,
        "results": len(latencies),
        "results_expected": expected,
        "wrong_results": wrong,
        "target_ms": round(target * 1000),
        "latencies_ms": [round(x * 1000, 2) for x in sorted(latencies)],
    }


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value * 1000, 2)


@dataclass
class Expectations:
    ls_windows: dict[tuple[str, float], int] = field(default_factory=dict)
    ba_ids: dict[int, float] = field(default_factory=dict)
    ls_records: int = 0


def expectations(stamped: Sequence[tuple[Send, float]], phase_start: float) -> Expectations:
    """What the measured phase must produce: LS windows it fills entirely, and every BA job."""
    expected = Expectations()
    last_ts = max(ts for _, ts in stamped)
    for send, ts in stamped:
        if send.tenant == "BA":
            expected.ba_ids[int(send.value["id"])] = ts
            continue
        if send.value["page"] == "/health":
            continue
        start = math.floor(ts)
        # Only windows that start inside the phase (no warm-up records in them) and close at least a
        # second before the input ends (later records exist to close them).
        if start >= phase_start and start + 2.0 <= last_ts:
            key = (send.key, float(start))
            expected.ls_windows[key] = expected.ls_windows.get(key, 0) + 1
            expected.ls_records += 1
    return expected


@dataclass(frozen=True)
class CpuSample:
    """CPU seconds used so far by the system's process, the broker's (when this run started one) and
    the whole machine: two samples around the measured phase say where the cores went (a system
    that sustains less than it calibrated may have lost them to the broker, or to other processes)."""

    at: float
    system_s: float | None
    broker_s: float | None
    machine_s: float | None

    @classmethod
    def take(cls, system_pid: int | None, broker_pid: int | None) -> CpuSample:
        system, broker = process_cpu_seconds(system_pid), process_cpu_seconds(broker_pid)
        return cls(time.monotonic(), system, broker, machine_busy_seconds())

    def since(self, start: CpuSample) -> dict[str, float | None]:
        """Per process and for the machine: CPU seconds between ``start`` and this sample, and the
        wall seconds between them (``None`` where a sample is missing)."""

        def used(now: float | None, then: float | None) -> float | None:
            return None if now is None or then is None else round(now - then, 2)

        machine = used(self.machine_s, start.machine_s)
        system = used(self.system_s, start.system_s)
        broker = used(self.broker_s, start.broker_s)
        known = [v for v in (system, broker) if v is not None]
        return {
            "wall_s": round(self.at - start.at, 2),
            "system_s": system,
            "broker_s": broker,
            "machine_s": machine,
            "others_s": None if machine is None else round(machine - sum(known), 2),
        }


def run_system(  # noqa: PLR0917
    system: str,
    settings: KafkaSettings,
    config: S1Config,
    capacity: Capacity,
    repetition: int,
    out: Path,
    progress: Progress,
    peer: PeerCommand | None = None,
    broker_pid: int | None = None,
) -> dict[str, Any]:
    run = f"{system}-{repetition}-{uuid.uuid4().hex[:6]}"
    topics = Topics.fresh(run)
    ensure_topics(make_admin(settings), topics.specs(config.partitions))
    ba_rate = capacity.ba_rate(config)
    warm = plan(
        config,
        ba_rate,
        config.warmup,
        bursts=False,
        seed=config.seed + 1000 + repetition,
        first_id=WARMUP_FIRST_ID,
    )
    measured = plan(config, ba_rate, config.duration, bursts=True, seed=config.seed + repetition)
    lingers = {"LS": config.ls_linger_ms, "BA": config.ba_linger_ms}
    producers = {
        tenant: make_producer(
            settings, **{"enable.idempotence": False, "acks": "1", "linger.ms": lingers[tenant]}
        )[0]
        for tenant in ("LS", "BA")
    }
    producer = producers["BA"]
    reader = OutputReader(settings, topics, config.partitions)
    metrics_port = None if peer is not None else config.metrics_port or free_port()
    queue_wait: dict[str, dict[str, float | None]] = {}
    stages: dict[str, dict[str, dict[str, float | None]]] = {}
    requests: dict[str, dict[str, float]] = {}
    stalls: dict[str, dict[str, float]] = {}
    hops: dict[str, float] = {}
    ba_run_s: float | None = None
    try:
        with system_process(
            system, settings, topics, run, config, capacity.iterations, out / "logs", metrics_port, peer
        ) as process:
            # Ready when a first BA result comes back (the group joined, the pipelines run).
            deadline = time.monotonic() + 120
            probe = 0
            while not reader.ba:
                if process.poll() is not None:
                    raise RuntimeError(
                        f"{system} exited with {process.returncode}; see {out / 'logs' / run}.log"
                    )
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"{system} produced nothing within 120 s; see {out / 'logs' / run}.log"
                    )
                probe += 1
                value = {"id": -probe, "payload": "probe", "ts": time.time()}
                producer.produce(topics.ba_in, json.dumps(value).encode(), f"probe{probe}".encode())
                producer.poll(0.2)
            progress(f"  {system}: running; warm-up {config.warmup:.0f} s")
            send_phase(producers, topics, warm, time.time())
            at_start = scrape(metrics_port) if metrics_port is not None else ""
            cpu_start = CpuSample.take(process.pid, broker_pid)
            phase_start = time.time()
            progress(f"  {system}: measuring {config.duration:.0f} s of bursty input")
            stamped = send_phase(producers, topics, measured, phase_start)
            expected = expectations(stamped, phase_start)
            drain_until = time.monotonic() + config.drain

            def done() -> bool:
                got_ba = {int(o.value.get("id", -1)) for o in reader.ba}
                got_ls = {(o.value.get("key"), float(o.value.get("window_start", -1))) for o in reader.ls}
                return set(expected.ba_ids) <= got_ba and set(expected.ls_windows) <= got_ls

            while not done() and time.monotonic() < drain_until:
                time.sleep(0.25)
            phase_end = time.time()
            cpu = CpuSample.take(process.pid, broker_pid).since(cpu_start)
            if metrics_port is not None:
                at_end = scrape(metrics_port)
                queue_wait = scheduler_queue_wait(at_end)
                stages = stage_percentiles(stage_buckets(at_start), stage_buckets(at_end))
                requests = kafka_requests(at_start, at_end)
                ba_run_s = mean_run_seconds(at_start, at_end, "BA")
                stalls = loop_stalls(at_start, at_end)
                hops = planned_hops(at_end)
    finally:
        reader.close()
    result = measure(system, config, expected, reader, phase_start, phase_end, capacity, ba_run_s=ba_run_s)
    result["cpu"] = cpu
    if cpu["broker_s"] is not None and cpu["wall_s"]:
        cpu["broker_cores"] = round(cpu["broker_s"] / cpu["wall_s"], 3)
    if cpu["system_s"] is not None and cpu["machine_s"] is not None:
        broker = "" if cpu["broker_s"] is None else f", broker {cpu['broker_s']:.1f} s"
        progress(
            f"  {system}: CPU while measured ({cpu['wall_s']:.0f} s): {system} {cpu['system_s']:.1f} s"
            f"{broker}, all other processes {cpu['others_s']:.1f} s"
        )
    if requests:
        result["kafka_requests"] = requests
        shown = [
            f"{client} {kind} {count:.0f}"
            for client, kinds in sorted(requests.items())
            for kind, count in sorted(kinds.items())
            if kind in ("Produce", "Fetch")
        ]
        progress(f"  {system}: requests while measured: {', '.join(shown)}")
    if metrics_port is not None:
        result["stalls"] = stalls
        said = ", ".join(
            f"{phase} {s['stalls']:.0f} ({s['seconds']:.2f} s)" for phase, s in sorted(stalls.items())
        )
        progress(f"  {system}: stalls of the worker's loop while measured: {said or 'none'}")
    for tenant, waits in queue_wait.items():
        if tenant in result:
            result[tenant].update(waits)
    for tenant, per_stage in stages.items():
        if tenant in result:
            result[tenant]["stages"] = per_stage
    for tenant, hop_ms in hops.items():
        if tenant in result:
            result[tenant]["planned_hop_ms"] = hop_ms
    return result


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def measure(  # noqa: PLR0917
    system: str,
    config: S1Config,
    expected: Expectations,
    reader: Outputs,
    phase_start: float,
    phase_end: float,
    capacity: Capacity,
    *,
    ba_run_s: float | None = None,
) -> dict[str, Any]:
    """Per tenant, what the outputs say (see the module docstring); ``load``: the BA load the phase
    ran at, from BA's mean seconds per job (``ba_run_s``) against the calibration's where both are
    known, else from the output rate during bursts."""
    calibrated_rps = capacity.ba_rps
    ls_latencies: list[float] = []
    ls_records = 0
    ls_wrong = 0
    seen_windows: set[tuple[str, float]] = set()
    for out in reader.ls:
        key = (str(out.value.get("key")), float(out.value.get("window_start", -1)))
        if key not in expected.ls_windows or key in seen_windows:
            continue
        seen_windows.add(key)
        count = int(out.value.get("value", 0))
        ls_records += count
        if count != expected.ls_windows[key]:
            ls_wrong += 1  # a window closed before all its records were counted
            continue
        ls_latencies.append(out.timestamp - float(out.value["window_end"]))
    ba_latencies: list[float] = []
    seen_ids: set[int] = set()
    ba_done: list[float] = []
    for out in reader.ba:
        job = int(out.value.get("id", -1))
        sent = expected.ba_ids.get(job)
        # Warm-up jobs reuse the measured phase's ids: only an output carrying this job's own send
        # time is its result (taking the first output of an id matched warm-up outputs to measured
        # jobs, with negative latencies).
        if sent is None or job in seen_ids or abs(float(out.value.get("ts", -1.0)) - sent) > 1e-6:
            continue
        seen_ids.add(job)
        ba_latencies.append(out.timestamp - sent)
        ba_done.append(out.timestamp)
    seconds = phase_end - phase_start
    sustained = sustained_rate(list(expected.ba_ids.values()), ba_done, SATURATED_BACKLOG_S * calibrated_rps)
    input_seconds = max(expected.ba_ids.values(), default=phase_start) - phase_start
    load = actual_load(
        config.load,
        len(expected.ba_ids) / input_seconds if input_seconds > 0 else 0.0,
        sustained,
        calibrated_rps,
        run_s=ba_run_s,
        calibrated_run_s=capacity.ba_run_s,
    )
    return {
        "load": load,
        "LS": tenant_stats(
            ls_latencies, len(expected.ls_windows), config.ls_target, ls_records, seconds, ls_wrong
        ),
        "BA": tenant_stats(ba_latencies, len(expected.ba_ids), config.ba_target, len(ba_latencies), seconds),
    }


# -- calibration runs (in-process cadenza workers on a backlog) -----------------------------------------


def live_input(
    settings: KafkaSettings, topics: Topics, config: S1Config, ba_rate: float, stop: threading.Event
) -> None:
    """LS at its benchmark rate and BA at ``ba_rate``, sent live until ``stop`` (for calibration)."""
    producer, _ = make_producer(settings, **{"enable.idempotence": False, "linger.ms": 5})
    rng = random.Random(5)
    started = time.monotonic()
    sent_ls = sent_ba = 0
    while not stop.is_set():
        elapsed = time.monotonic() - started
        for _ in range(int(elapsed * config.ls_rate) - sent_ls):
            user = f"u{rng.randrange(config.users)}"
            value = {"user": user, "page": "/p1", "ts": time.time()}
            producer.produce(topics.ls_in, json.dumps(value).encode(), user.encode())
            sent_ls += 1
        for _ in range(int(elapsed * ba_rate) - sent_ba):
            value = {"id": sent_ba, "payload": f"cal-{sent_ba}", "ts": time.time()}
            producer.produce(topics.ba_in, json.dumps(value).encode(), str(sent_ba).encode())
            sent_ba += 1
        producer.poll(0)
        stop.wait(0.01)
    producer.flush(10)


#: The policy of the worker that measures BA's capacity beside LS: one that runs LS first. Under fifo,
#: BA fed beyond capacity queues LS behind it, so LS was hardly run during the measurement (0-120 of
#: 300 LS records/s, 2026-11-28) and BA got the CPU that LS, its repartition hop and its progress
#: records take in every run of a deadline-aware policy: the capacity came out 20-30% too high, and
#: every cameo repetition ran overloaded at a requested load of 0.75.
CALIBRATION_POLICY = "cameo"


def calibrate(settings: KafkaSettings, config: S1Config, logs: Path, progress: Progress) -> Capacity:
    """Records/s one worker process sustains: LS alone on a backlog (fifo), and BA fed live beyond
    what it can run, beside live LS that is served in full (``CALIBRATION_POLICY``).

    BA is measured under live input because that is what the runs give it: the worker then fetches
    small batches as they arrive and this process produces on the same cores. Measured on a backlog
    instead (an earlier version), BA's capacity came out about 1.5 x what the worker sustained in
    the runs, and full runs were overloaded under every policy.
    """
    iterations = burn_iterations(config.ba_cost_ms, probes=SPEED_PROBES)
    if config.ba_cost_kind == "cpu":
        progress(f"calibration: a BA job is {config.ba_cost_ms:g} ms of the worker's CPU time")
    else:
        progress(f"calibration: burn({iterations}) takes about {config.ba_cost_ms:g} ms here")
    cap = Capacity(
        ls_rps=None, ba_rps=1.0, iterations=iterations, speed_iterations=machine_speed(config.ba_cost_ms)
    )
    if config.calibrate_ls:
        cap.ls_rps = _calibrate_ls(settings, config, logs, iterations)
        progress(f"calibration: LS alone runs at {cap.ls_rps:,.0f} records/s")
    # BA live, at twice what its cost allows on one core, beside LS live: what comes out is capacity.
    overdrive = 2000.0 / config.ba_cost_ms
    run = f"cal-ba-{uuid.uuid4().hex[:6]}"
    topics = Topics.fresh(run)
    ensure_topics(make_admin(settings), topics.specs(config.partitions))
    reader = OutputReader(settings, topics, config.partitions)
    stop = threading.Event()
    sender = threading.Thread(
        target=live_input, args=(settings, topics, config, overdrive, stop), daemon=True
    )
    port = free_port()
    try:
        with system_process(CALIBRATION_POLICY, settings, topics, run, config, iterations, logs, port):
            sender.start()
            deadline = time.monotonic() + 120
            while not reader.ba:
                if time.monotonic() > deadline:
                    raise RuntimeError("calibration of BA produced nothing")
                time.sleep(0.05)
            time.sleep(config.calibration_skip)  # past the start: the buffer fills, it runs flat out
            begin, begin_count, begin_ls = time.time(), len(reader.ba), _ls_counted(reader)
            at_begin = scrape(port)
            time.sleep(config.calibration_measure)
            end_count, end_ls = len(reader.ba), _ls_counted(reader)
            cap.ba_run_s = mean_run_seconds(at_begin, scrape(port), "BA")
            elapsed = time.time() - begin
            cap.ba_rps = (end_count - begin_count) / elapsed
            cap.ls_beside_ba_rps = (end_ls - begin_ls) / elapsed
    finally:
        stop.set()
        if sender.is_alive():
            sender.join(15)
        reader.close()
    progress(
        f"calibration: BA fed live at {overdrive:,.0f}/s beside LS at {config.ls_rate:g}/s runs at "
        f"{cap.ba_rps:,.0f} records/s under {CALIBRATION_POLICY} "
        f"(LS ran {cap.ls_beside_ba_rps:,.0f}/s meanwhile)"
    )
    return cap


def _calibrate_ls(settings: KafkaSettings, config: S1Config, logs: Path, iterations: int) -> float:
    """LS records/s one worker runs alone on a backlog (fifo): a check that LS leaves room for BA."""
    count = 6000
    run = f"cal-ls-{uuid.uuid4().hex[:6]}"
    topics = Topics.fresh(run)
    ensure_topics(make_admin(settings), topics.specs(config.partitions))
    producer, _ = make_producer(settings, **{"enable.idempotence": False, "linger.ms": 5})
    rng = random.Random(3)
    for i in range(count):
        user = f"u{rng.randrange(config.users)}"
        value = {"user": user, "page": "/p1", "ts": time.time() - 30 + i * 20 / count}
        producer.produce(topics.ls_in, json.dumps(value).encode(), user.encode())
        producer.poll(0)
    producer.flush(30)
    reader = OutputReader(settings, topics, config.partitions)
    try:
        with system_process("fifo", settings, topics, run, config, iterations, logs):
            deadline = time.monotonic() + 180
            # The window results appear as the backlog's watermark advances.
            while _ls_counted(reader) < count * 0.9:
                if time.monotonic() > deadline:
                    raise RuntimeError("calibration of LS did not finish")
                time.sleep(0.05)
            done = time.time()
            processed = _ls_counted(reader)
            return processed / max(1e-3, done - min(o.timestamp for o in reader.ls))
    finally:
        reader.close()


def _ls_counted(reader: OutputReader) -> int:
    """LS records counted in the window results read so far (a window's result counts its records)."""
    return sum(int(o.value.get("value", 0)) for o in reader.ls)


# -- the whole benchmark -----------------------------------------------------------------------------------


@contextmanager
def broker_settings(bootstrap: str | None) -> Iterator[KafkaSettings]:
    with broker_with_pid(bootstrap) as (settings, _):
        yield settings


@contextmanager
def broker_with_pid(
    bootstrap: str | None, pid: int | None = None
) -> Iterator[tuple[KafkaSettings, int | None]]:
    """The broker at ``bootstrap`` (its ``pid`` if the caller knows it), else an embedded one started
    here, with its pid: the CPU a run costs the broker is measured when the pid is known."""
    if bootstrap:
        yield KafkaSettings.load(bootstrap_servers=bootstrap), pid
        return
    with EmbeddedBroker() as broker:
        yield KafkaSettings.load(bootstrap_servers=broker.bootstrap_servers), broker.pid


@contextmanager
def run_broker(shared: tuple[KafkaSettings, int | None] | None) -> Iterator[tuple[KafkaSettings, int | None]]:
    """The ``shared`` broker (settings and pid), or an embedded broker for this run only."""
    if shared is not None:
        yield shared
        return
    with broker_with_pid(None) as broker:
        yield broker


def run_benchmark(
    out: Path,
    *,
    config: S1Config,
    bootstrap: str | None = None,
    progress: Progress = print,
    peers: Mapping[str, PeerCommand] | None = None,
    broker_pid: int | None = None,
) -> dict[str, Any]:
    """Calibrate, then run every system of ``config`` ``config.repetitions`` times; write s1.json/png.

    A system is a peer if ``peers`` names it, else a cadenza scheduling policy. ``broker_pid``: the
    process of the broker at ``bootstrap``, if it runs on this machine (its CPU is then measured).
    """
    peers = peers or {}
    unknown = sorted(set(config.systems) - set(POLICIES) - set(peers))
    if unknown:
        raise ValueError(f"unknown S1 systems {unknown}; choose from {', '.join((*POLICIES, *peers))}")
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    runs: dict[str, list[dict[str, Any]]] = {system: [] for system in config.systems}
    with ExitStack() as stack:
        per_run = config.broker_per_run and not bootstrap
        shared = None if per_run else stack.enter_context(broker_with_pid(bootstrap, broker_pid))
        with run_broker(shared) as (settings, _):
            capacity = calibrate(settings, config, out / "logs", progress)
        ba_rate = capacity.ba_rate(config)
        progress(
            f"input: LS {config.ls_rate:g}/s steady, BA {ba_rate:,.0f}/s mean in bursts "
            f"(load {config.load:.0%})"
        )
        phases = phase_order(config)
        for index, (system, repetition) in enumerate(phases, 1):
            speed = speed_check(config, capacity)
            progress(
                f"phase {index}/{len(phases)}: {system} (repetition {repetition + 1}/{config.repetitions}); "
                f"speed check: {speed['relative']:.0%} of the calibration's speed"
            )
            try:
                peer = peers.get(system)
                with run_broker(shared) as (settings, pid):
                    run = run_system(
                        system,
                        settings,
                        config,
                        capacity,
                        repetition,
                        out,
                        progress,
                        peer,
                        pid,
                    )
                run["phase"] = index
                run["speed"] = speed
                runs[system].append(run)
            except Exception as exc:  # one system failing must not lose the others' results
                progress(f"  {system} failed: {exc}")
    systems = {system: median_run(entries) for system, entries in runs.items() if entries}
    for entry in systems.values():
        for tenant in TENANTS:
            entry[tenant].pop("latencies_ms", None)
    result: dict[str, Any] = {
        "benchmark": "s1_multi_tenant_burst",
        "systems": systems,
        "runs": runs,
        "config": asdict(config),
        "calibration": asdict(capacity),
        "ba_mean_rate": round(ba_rate, 1),
        **machine_and_commit(),
    }
    write_result(out, "s1.json", {**result, "runs": strip_latencies(runs)})
    plot(runs, config, out / "s1.png")
    return result


#: Timings of 2,000 ``burn`` iterations whose median is the calibration's cost (about 1 ms each here):
#: a median over many short probes is not moved by a moment when another process held the core.
SPEED_PROBES = 41
#: The speed check's probes before a phase, ``SPEED_SPACING_S`` apart: spread over a quarter of a
#: second, their mean meets both of the host's speeds in about the share it is at each.
SPEED_SAMPLES = 40
SPEED_SPACING_S = 0.005


def speed_check(config: S1Config, capacity: Capacity) -> dict[str, float]:
    """The machine's speed before a phase, as the ``burn`` iterations that take ``ba_cost_ms`` now,
    against the calibration's (a few tens of ms to find).

    Shown, not acted on: this host switches between two speeds about 1.9x apart several times a
    second, so a speed read before a phase does not say what the phase will meet (sizing the phase's
    jobs by it made loads of 0.6-1.35 out of 0.75, 2026-12-06). ``ba_cost_kind="cpu"`` keeps a job's
    cost whatever the speed; the load each phase actually ran at is measured from its time per BA
    job (``actual_load``).
    """
    iterations = machine_speed(config.ba_cost_ms)
    return {"iterations": iterations, "relative": round(iterations / capacity.speed_iterations, 3)}


def machine_speed(cost_ms: float) -> int:
    """The mean over ``SPEED_SAMPLES`` spaced probes of the ``burn`` iterations that take ``cost_ms``:
    the host's speed as a mix of its two, measured the same way at calibration and before a phase."""
    speeds = []
    for _ in range(SPEED_SAMPLES):
        speeds.append(burn_iterations(cost_ms, probes=1))
        time.sleep(SPEED_SPACING_S)
    return round(statistics.fmean(speeds))


def strip_latencies(runs: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    return {
        system: [
            {
                t: {k: v for k, v in stats.items() if k != "latencies_ms"} if t in TENANTS else stats
                for t, stats in run.items()
            }
            for run in entries
        ]
        for system, entries in runs.items()
    }


def median_run(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """Per tenant, the median of each figure over the repetitions, with min and max of the met ratio."""
    merged: dict[str, Any] = {}
    for tenant in ("LS", "BA"):
        stats = [entry[tenant] for entry in entries]
        row: dict[str, Any] = {}
        for key in (
            "p50_ms",
            "p95_ms",
            "p99_ms",
            "deadline_met_ratio",
            "throughput_rps",
            "records",
            "results",
            "wrong_results",
        ):
            values = [s[key] for s in stats if s[key] is not None]
            row[key] = statistics.median(values) if values else None
        met = [s["deadline_met_ratio"] for s in stats if s["deadline_met_ratio"] is not None]
        row["deadline_met_min"] = min(met) if met else None
        row["deadline_met_max"] = max(met) if met else None
        row["results_expected"] = statistics.median(s["results_expected"] for s in stats)
        row["target_ms"] = stats[0]["target_ms"]
        row["latencies_ms"] = stats[len(stats) // 2]["latencies_ms"]
        for key in ("queue_wait_p50_ms", "queue_wait_p99_ms"):
            waits = [s[key] for s in stats if s.get(key) is not None]
            if waits:
                row[key] = statistics.median(waits)
        stages: dict[str, dict[str, float]] = {}
        for stage in STAGES:
            for key in ("p50_ms", "p99_ms"):
                values = [
                    s["stages"][stage][key]
                    for s in stats
                    if stage in s.get("stages", {}) and s["stages"][stage][key] is not None
                ]
                if values:
                    stages.setdefault(stage, {})[key] = statistics.median(values)
        if stages:
            row["stages"] = stages
        merged[tenant] = row
    loads = [entry["load"] for entry in entries if "load" in entry]
    if loads:
        merged["load"] = {
            "actual": [load["actual"] for load in loads],
            "off_load": [load["off_load"] for load in loads],
        }
    return merged


def plot(runs: dict[str, list[dict[str, Any]]], config: S1Config, path: Path) -> None:
    """The latency CDFs and deadline bars; skipped, saying why, where matplotlib is not installed."""
    try:
        import matplotlib  # noqa: PLC0415
    except ImportError:
        print(f"no plot at {path}: matplotlib is not installed (pip install 'cadenza[demo]')")
        return

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    systems = [s for s in runs if runs[s]]
    fig, grid = plt.subplots(2, 3, figsize=(17, 10))
    axes = grid[0]
    for ax, tenant, target in ((axes[0], "LS", config.ls_target), (axes[1], "BA", config.ba_target)):
        for system in systems:
            latencies = sorted(runs[system][len(runs[system]) // 2][tenant]["latencies_ms"])
            if latencies:
                ys = [(i + 1) / len(latencies) for i in range(len(latencies))]
                ax.plot(latencies, ys, label=system, drawstyle="steps-post")
        ax.axvline(target * 1000, color="grey", linestyle="--", label="target")
        ax.set_xscale("log")
        ax.set_xlabel("latency (ms, log)")
        ax.set_ylabel("share of results")
        ax.set_title(f"{tenant}: latency CDF")
        ax.legend(fontsize=8)
    width = 0.38
    xs = range(len(systems))
    for offset, tenant in ((-width / 2, "LS"), (width / 2, "BA")):
        values = [median_run(runs[s])[tenant]["deadline_met_ratio"] or 0.0 for s in systems]
        axes[2].bar([x + offset for x in xs], values, width, label=tenant)
    axes[2].set_xticks(list(xs), systems)
    axes[2].set_ylim(0, 1.05)
    axes[2].set_title("deadline met (share of expected results)")
    axes[2].legend()
    merged = {system: median_run(runs[system]) for system in systems}
    plot_stages(grid[1][0], merged, "LS")
    plot_stages(grid[1][1], merged, "BA")
    plot_loads(grid[1][2], runs, config)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"wrote {path}")


def plot_stages(ax: Any, merged: dict[str, dict[str, Any]], tenant: str) -> None:
    """Per system, a bar stacking the p99 of each stage of ``tenant``, with its end-to-end p99 marked.

    p99s do not add up exactly (the slowest records of one stage are not those of the next), so the
    stack shows where the tail is spent, not the end-to-end p99: that is the black tick.
    """
    palette = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860")
    colors = dict(zip(STAGES, palette, strict=True))
    shown: set[str] = set()
    for x, entry in enumerate(merged.values()):
        bottom = 0.0
        for stage, values in entry[tenant].get("stages", {}).items():
            height = values.get("p99_ms") or 0.0
            ax.bar(
                x, height, 0.6, bottom=bottom, color=colors[stage], label=None if stage in shown else stage
            )
            shown.add(stage)
            bottom += height
        e2e = entry[tenant].get("p99_ms")
        if e2e is not None:
            ax.plot([x - 0.35, x + 0.35], [e2e, e2e], color="black", linewidth=2)
    ax.set_xticks(range(len(merged)), list(merged))
    ax.set_ylabel("ms")
    ax.set_title(f"{tenant}: p99 of each stage, stacked (black: end-to-end p99)")
    if shown:
        ax.legend(fontsize=8)


def plot_loads(ax: Any, runs: dict[str, list[dict[str, Any]]], config: S1Config) -> None:
    """The load each phase actually ran at; red: more than 10% off the load asked for (``off_load``)."""
    systems = [s for s in runs if runs[s]]
    for x, system in enumerate(systems):
        for entry in runs[system]:
            load = entry.get("load", {})
            if load.get("actual") is not None:
                ax.scatter(x, load["actual"], color="red" if load["off_load"] else "black")
    ax.axhline(config.load, color="grey", linestyle="--", label="requested")
    ax.set_xticks(range(len(systems)), systems)
    ax.set_title("BA load per phase (the asked load on the capacity the phase had)")
    ax.legend(fontsize=8)


#: The share of expected results within target at which a tenant counts as having met its target
#: (the benchmark issue's goal).
MET_GOAL = 0.99


def verdict(row: dict[str, Any], goal: float = MET_GOAL) -> str:
    """One plain phrase on whether a tenant met its target: what a reader of a table wants first."""
    missing = row.get("results_expected", 0) - row.get("results", 0)
    return met_phrase(row.get("deadline_met_ratio"), row.get("target_ms", 0), missing, goal)


def met_phrase(
    ratio: float | None, target_ms: int, missing: float, goal: float = MET_GOAL, places: int = 0
) -> str:
    """``MET``/``MISSED`` with the share within ``target_ms`` (to ``places`` decimals of a percent), the
    goal and the results missing: the one wording of a tenant's verdict, per phase or pooled."""
    if ratio is None:
        return "no results expected"
    shown = f"{ratio:.{places}%}"
    if ratio >= goal:
        return f"MET: {shown} within {target_ms:,} ms"
    why = f", {missing:,.0f} missing" if missing > 0 else ""
    return f"MISSED: {shown} within {target_ms:,} ms (goal {goal:.0%}{why})"


def format_table(result: dict[str, Any]) -> str:
    lines = [
        f"{'system':8s} {'LS p99 ms':>10s} {'LS met':>7s} {'BA p99 ms':>10s} {'BA met':>7s} {'BA rec/s':>9s} "
        f"{'LS wait p99 ms':>15s}  load per phase"
    ]
    off_load = False
    for system, entry in result["systems"].items():
        ls, ba = entry["LS"], entry["BA"]
        load = entry.get("load", {})
        cells = [
            ("-" if actual is None else f"{actual:.2f}") + (" OFF-LOAD" if off else "")
            for actual, off in zip(load.get("actual", []), load.get("off_load", []), strict=True)
        ]
        off_load = off_load or any(load.get("off_load", []))
        lines.append(
            f"{system:8s} {_fmt(ls['p99_ms']):>10s} {_ratio(ls['deadline_met_ratio']):>7s} "
            f"{_fmt(ba['p99_ms']):>10s} {_ratio(ba['deadline_met_ratio']):>7s} "
            f"{_fmt(ba['throughput_rps']):>9s} {_fmt(ls.get('queue_wait_p99_ms')):>15s}  "
            f"{', '.join(cells) or '-'}"
        )
    if off_load:
        lines.append(
            f"OFF-LOAD: BA's capacity in that phase was more than {LOAD_TOLERANCE:.0%} off the one "
            "calibrated (other processes took cores, the host's speed moved, or the policy's own cost "
            "per record took capacity): it did not run at the load asked for."
        )
    return "\n".join(lines)


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"
