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

This module runs the scenario: the calibration, each system's run and the whole benchmark. Its
parts: :mod:`~cadenza.demo.s1_config` (configuration, sizings, what the calibration found),
:mod:`~cadenza.demo.s1_io` (the input plan, the producers, the output reader),
:mod:`~cadenza.demo.s1_process` (the system's process, its CPU, the broker),
:mod:`~cadenza.demo.s1_results` (the figures of a run, the median of runs, the verdict's wording),
:mod:`~cadenza.demo.s1_plot` (``s1.png``) and :mod:`~cadenza.demo.worker_metrics` (what a worker's
``/metrics`` adds). The peers' commands and the benchmark's table are in the checkout's
``benchmarks/scenarios/bench_s1.py``.
"""

from __future__ import annotations

import json
import random
import statistics
import threading
import time
import uuid
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import asdict
from pathlib import Path
from typing import Any

from cadenza.demo.cpu_work import burn
from cadenza.demo.machine import machine_and_commit, write_result
from cadenza.demo.s1_config import (
    POLICIES,
    TENANTS,
    WARMUP_FIRST_ID,
    Capacity,
    Progress,
    S1Config,
    phase_order,
)
from cadenza.demo.s1_io import OutputReader, Topics, live_input, plan, send_phase
from cadenza.demo.s1_plot import plot
from cadenza.demo.s1_process import (
    CpuSample,
    PeerCommand,
    broker_with_pid,
    free_port,
    run_broker,
    system_process,
)
from cadenza.demo.s1_results import expectations, measure, median_run, strip_latencies
from cadenza.demo.worker_metrics import (
    kafka_requests,
    loop_stalls,
    mean_run_seconds,
    planned_hops,
    scheduler_queue_wait,
    scrape,
    stage_buckets,
    stage_percentiles,
)
from cadenza.infra.kafka.clients import make_admin, make_producer
from cadenza.infra.kafka.topics import ensure_topics
from cadenza.settings import KafkaSettings

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


# -- one system ------------------------------------------------------------------------------------------


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


# -- calibration runs (in-process cadenza workers on a backlog) -----------------------------------------

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
