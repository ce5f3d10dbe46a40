"""Throughput against the peers: parse JSON -> map -> produce for cadenza, faust, quixstreams and a raw loop.

Every system runs as its own process (cadenza: a worker from this venv; faust-streaming and quixstreams:
apps from their own venvs, built on first use by :mod:`peers.venvs`; raw: a bare confluent-kafka loop,
the ceiling for one Python process) and reads the same pre-produced, seeded records (4 partitions) from
the beginning, in a fresh consumer group, writing to a fresh output topic. Systems alternate within each
repetition, in an order rotated per repetition, so drift in the machine's load is shared out rather than
landing on one system.

**What is timed.** A counting process reads the output topic as the system writes it (completion is
judged by counting outputs, not by watermarks). ``rps`` is ``(outputs - 1) / (t_last - t_first)``: the
records that arrived after the first one, over the time from the first output to the last. That leaves
out everything before the first output (interpreter start, imports, the group join, which on the
embedded broker alone takes ~3 s, faust's and quixstreams' own start-up work), which differs by
seconds between systems and is not throughput; measuring a warm-up and subtracting it instead would
add the noise of a second measurement for the same effect. The first output is emitted as soon as a
system has processed its first batch, so the window covers essentially the whole input. ``rps_per_cpu_s``
is the same record count over the CPU seconds (user + system, all threads) the system's process spent
in that same window, sampled from ``/proc`` when the first and the last output are read.

Per system the JSON holds the median, min and max ``rps`` over the repetitions, the median
``rps_per_cpu_s`` and every run (each with its ``cpu_utilisation``: CPU seconds over wall seconds).
``--quick``: one repetition of a smaller input, a few minutes at most.

**The windowed workload** (``--workload windowed``; the default is ``map``, above): a count per key in
tumbling 1-second event-time windows, one result per (key, window) when the window closes, for
cadenza (``.window(Tumbling("1s")).count()``), quixstreams (``tumbling_window(...).count().final()``)
and faust (a tumbling windowed ``Table``). The raw loop is left out (it has no windows; the JSON says
so under ``left_out``). The input (:mod:`peers.windowed`) is the same seeded records with an event time
``ts`` (5,000 records per event-time second, up to 80 ms out of order; every system allows 100 ms), sent
to the partition of their key (1,000 users), then one flush record per partition an hour ahead in
event time that closes every window. Results are per window, not per record, so the rate is **input
records per second from the first result to the last**: a system emitting final results can emit
nothing before some partition passes the first window's close point, and emits the last windows when
the flush records arrive, so the records it spends that time on are the input records at or past the
first close point (to within one partition's progress: about one window of input, 1/40 of the full
run). faust cannot emit final results in event time (its windows close against the wall clock, and
0.15.3 drops the close in all partitions but one, see ``peers/faust_windowed.py``), so it emits an
update per input record and is timed as in the map workload: updates - 1 over first to last. Every
run's results are compared with a brute-force count of the input (``results_correct`` per run and per
system; for updates the largest count per window is faust's result, and a final result said twice is
an error). ``rps_per_cpu_s`` and ``cpu_utilisation`` cover the same first-to-last interval.
Written as ``throughput-windowed.json`` and ``.png``.

    python benchmarks/scenarios/bench_throughput.py --out DIR [--quick] [--bootstrap host:port]
        [--workload windowed]
    cadenza bench throughput --out DIR [--quick] [--bootstrap host:port] [--workload windowed]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import environment, stop_process, write_result
from peers.venvs import FAUST, QUIXSTREAMS, PeerEnv, PeerInstallError, ensure_peer_env
from peers.windowed import (
    WindowedRecord,
    WindowTally,
    brute_force_counts,
    flush_records,
    make_windowed_records,
    records_after_first_close,
)
from peers.workload import make_records

from cadenza.infra.kafka.clients import DeliveryReport, flush_or_raise, make_admin, make_producer
from cadenza.infra.kafka.topics import TopicSpec, delete_topics, ensure_topics
from cadenza.settings import KafkaSettings

__all__ = [
    "SYSTEMS",
    "WINDOWED_SYSTEMS",
    "WORKLOADS",
    "BenchConfig",
    "SystemSpec",
    "build_result",
    "config_for",
    "plot",
    "run_benchmark",
    "run_order",
    "run_rates",
    "summarize",
]

PEERS_DIR = Path(__file__).resolve().parent / "peers"
PARTITIONS = 4
SEED = 20_261_122
#: Kafka's defaults, stated: the embedded broker describes no retention.ms unless it was set, and
#: quixstreams' stateful apps derive their changelog topics' retention from the input's (a KeyError
#: without it). Set on the input of both workloads, so they share one setup.
INPUT_CONFIGS = {"retention.ms": "604800000", "retention.bytes": "-1"}
Progress = Callable[[str], None]


@dataclass(frozen=True)
class SystemSpec:
    """A system under test: its app script and, for a peer, the venv it runs from (None: this venv)."""

    name: str
    script: str
    peer: PeerEnv | None = None
    #: Windowed workload only: the system emits an update per input record, not a final result per window.
    updates: bool = False


SYSTEMS: tuple[SystemSpec, ...] = (
    SystemSpec("cadenza", "cadenza_throughput.py"),
    SystemSpec("faust", "faust_throughput.py", FAUST),
    SystemSpec("quixstreams", "quix_throughput.py", QUIXSTREAMS),
    SystemSpec("raw", "raw_throughput.py"),
)
WINDOWED_SYSTEMS: tuple[SystemSpec, ...] = (
    SystemSpec("cadenza", "cadenza_windowed.py"),
    SystemSpec("faust", "faust_windowed.py", FAUST, updates=True),
    SystemSpec("quixstreams", "quix_windowed.py", QUIXSTREAMS),
)
WORKLOADS = ("map", "windowed")
#: Why the windowed workload has no raw loop (recorded in its JSON).
RAW_LEFT_OUT = (
    "a bare consume -> produce loop has no windows, keyed state or event time; writing them would be "
    "benchmarking a fourth framework, so the windowed workload has no raw ceiling"
)


@dataclass(frozen=True)
class BenchConfig:
    records: int
    repetitions: int
    quick: bool
    #: Longest a single run may take, start-up included, before it is declared failed.
    run_timeout_s: float


def config_for(quick: bool, records: int | None = None, repetitions: int | None = None) -> BenchConfig:
    """Input size and repetitions. Full: 200k records x 3 (faust, the slowest at ~3.5k/s here, needs about
    a minute a run); quick: 20k records x 1."""
    n = records if records is not None else (20_000 if quick else 200_000)
    reps = repetitions if repetitions is not None else (1 if quick else 3)
    if n < 2 or reps < 1:
        raise ValueError("records must be >= 2 and repetitions >= 1")
    # Generous: 60 s of start-up plus 1,000 records/s, well below the slowest system measured here.
    return BenchConfig(records=n, repetitions=reps, quick=quick, run_timeout_s=60.0 + n / 1000.0)


def run_order(systems: Sequence[str], repetition: int) -> list[str]:
    """The systems rotated by the repetition number, so none always runs first (or last)."""
    shift = repetition % len(systems) if systems else 0
    return [*systems[shift:], *systems[:shift]]


def run_rates(
    outputs: int,
    first_at: float,
    last_at: float,
    cpu_first_s: float | None,
    cpu_last_s: float | None,
    *,
    counted: int | None = None,
) -> dict[str, float | None]:
    """rps and rps per CPU second of one run, over the window from the first output to the last.

    ``counted``: the input records that window is spent on; by default ``outputs - 1`` (one output per
    input record). The windowed workload passes the input records past the first window's close.
    """
    if outputs < 2:
        raise ValueError(f"a rate needs at least two outputs, got {outputs}")
    if counted is None:
        counted = outputs - 1
    elif counted < 1:
        raise ValueError(f"a rate needs at least one counted record, got {counted}")
    seconds = last_at - first_at
    if seconds <= 0:
        raise ValueError(f"the last output came no later than the first ({first_at} .. {last_at})")
    cpu_s = None if cpu_first_s is None or cpu_last_s is None else cpu_last_s - cpu_first_s
    return {
        "seconds": round(seconds, 4),
        "rps": round(counted / seconds, 1),
        "cpu_s": None if cpu_s is None else round(cpu_s, 3),
        "rps_per_cpu_s": round(counted / cpu_s, 1) if cpu_s else None,
        "cpu_utilisation": round(cpu_s / seconds, 3) if cpu_s is not None else None,
    }


def summarize(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Median, min and max rps, and the median rps per CPU second, over a system's successful runs."""
    good = [run for run in runs if run.get("rps") is not None]
    summary: dict[str, Any]
    if not good:
        summary = {"rps": None, "rps_min": None, "rps_max": None, "rps_per_cpu_s": None, "runs": list(runs)}
    else:
        rates = [float(run["rps"]) for run in good]
        per_cpu = [float(run["rps_per_cpu_s"]) for run in good if run.get("rps_per_cpu_s") is not None]
        summary = {
            "rps": round(statistics.median(rates), 1),
            "rps_min": round(min(rates), 1),
            "rps_max": round(max(rates), 1),
            "rps_per_cpu_s": round(statistics.median(per_cpu), 1) if per_cpu else None,
            "runs": list(runs),
        }
    if any("results_correct" in run for run in runs):  # the windowed workload: every run must be right
        summary["results_correct"] = all(run.get("results_correct") is True for run in runs)
    return summary


def build_result(
    runs: dict[str, list[dict[str, Any]]],
    env: dict[str, object],
    settings: dict[str, Any],
    workload: str = "map",
) -> dict[str, Any]:
    """The throughput(-windowed).json document: per system a summary, then the machine, the commit and
    the settings."""
    machine = {k: v for k, v in env.items() if k != "commit"}
    systems = {name: summarize(system_runs) for name, system_runs in runs.items()}
    ratios: dict[str, float | None] = {}
    cadenza = systems.get("cadenza", {}).get("rps")
    peers = ("faust", "quixstreams", "raw") if workload == "map" else ("faust", "quixstreams")
    for peer in peers:
        other = systems.get(peer, {}).get("rps")
        ratios[f"cadenza_over_{peer}"] = round(cadenza / other, 3) if cadenza and other else None
    result: dict[str, Any] = {
        "benchmark": "throughput" if workload == "map" else f"throughput-{workload}",
        "workload": workload,
        "systems": systems,
        "ratios": ratios,
        "settings": settings,
        "machine": machine,
        "commit": str(env.get("commit", "unknown")),
    }
    if workload == "windowed":
        result["left_out"] = {"raw": RAW_LEFT_OUT}
    return result


def plot(result: dict[str, Any], path: Path) -> Path:
    """Bars of median rps with min/max whiskers, and median rps per CPU second, per system."""
    import matplotlib  # noqa: PLC0415 - only when plotting

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    names = [name for name, entry in result["systems"].items() if entry.get("rps") is not None]
    entries = [result["systems"][name] for name in names]
    medians = [entry["rps"] for entry in entries]
    low = [entry["rps"] - entry["rps_min"] for entry in entries]
    high = [entry["rps_max"] - entry["rps"] for entry in entries]
    per_cpu = [entry.get("rps_per_cpu_s") or 0.0 for entry in entries]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.2))
    left.bar(names, medians, yerr=[low, high], capsize=6, color="#4c72b0")
    left.set_title("records/s (median, min-max whiskers)")
    for x, value in enumerate(medians):
        left.annotate(f"{value:,.0f}", (x, value), ha="center", va="bottom", fontsize=8)
    right.bar(names, per_cpu, color="#55a868")
    right.set_title("records per CPU second of the system's process")
    for x, value in enumerate(per_cpu):
        right.annotate(f"{value:,.0f}", (x, value), ha="center", va="bottom", fontsize=8)
    machine = result.get("machine", {})
    settings = result.get("settings", {})
    title = settings.get("title", "parse JSON -> map -> produce")
    fig.suptitle(
        f"{title}, {settings.get('records', '?'):,} records, {PARTITIONS} partitions, "
        f"{settings.get('repetitions', '?')} rep(s); {machine.get('cpus', '?')} CPUs, "
        f"commit {result.get('commit', '?')}",
        fontsize=9,
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


# --- running ------------------------------------------------------------------------------------------


def produce_input(settings: KafkaSettings, topic: str, records: int, seed: int) -> None:
    """The map workload's input: seeded records, partitions in turn, producer-stamped timestamps."""
    _produce(
        settings,
        topic,
        ((key, value, i % PARTITIONS, None) for i, (key, value) in enumerate(make_records(records, seed))),
    )


def produce_windowed_input(settings: KafkaSettings, topic: str, records: Sequence[WindowedRecord]) -> None:
    """The windowed workload's input: each record to its key's partition, stamped with its event time,
    then the flush records that close every window."""
    everything = [*records, *flush_records(records, PARTITIONS)]
    _produce(settings, topic, ((r.key.encode(), r.value, r.partition, r.timestamp_ms) for r in everything))


def _produce(
    settings: KafkaSettings, topic: str, records: Iterable[tuple[bytes, bytes, int, int | None]]
) -> None:
    """Produce ``(key, value, partition, timestamp ms or None: the producer's clock)`` records."""
    producer, errors = make_producer(settings, **{"linger.ms": 20, "batch.num.messages": 10000})
    report = DeliveryReport()
    for i, (key, value, partition, timestamp_ms) in enumerate(records):
        while True:
            try:
                producer.produce(
                    topic, value, key, partition=partition, on_delivery=report, timestamp=timestamp_ms or 0
                )
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    flush_or_raise(producer, report, timeout=120)
    errors.raise_fatal()


def _tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return "(no log)"
    return "\n".join(f"    {line}" for line in text) or "    (empty log)"


@dataclass(frozen=True)
class WindowedPlan:
    """What the windowed workload's input must produce: the brute-force counts and the records a run's
    first-to-last-result time is spent on."""

    expected: dict[tuple[str, int], int]
    data_records: int
    counted: int

    @classmethod
    def of(cls, records: Sequence[WindowedRecord]) -> WindowedPlan:
        return cls(brute_force_counts(records), len(records), records_after_first_close(records))

    def counter_expects(self, system: SystemSpec) -> int:
        """Outputs that complete a run: one per window, or (updates) one per data record."""
        return self.data_records if system.updates else len(self.expected)

    def judge(self, system: SystemSpec, tally: WindowTally) -> dict[str, Any]:
        return tally.compare(self.expected, updates=system.updates)


@dataclass
class _Context:
    settings: KafkaSettings
    input_topic: str
    config: BenchConfig
    pythons: dict[str, str]
    logs: Path
    workdir: Path
    windowed: WindowedPlan | None = None


def run_one(system: SystemSpec, repetition: int, ctx: _Context) -> dict[str, Any]:
    """One run of one system on the shared input; the run's record (with ``error`` if it failed)."""
    suffix = uuid.uuid4().hex[:8]
    output = f"bench-tp-out-{system.name}-{suffix}"
    group = f"bench-tp-{system.name}-{suffix}"
    admin = make_admin(ctx.settings)
    ensure_topics(admin, [TopicSpec(output, PARTITIONS)])
    log = ctx.logs / f"{system.name}-rep{repetition + 1}.log"
    workdir = ctx.workdir / f"{system.name}-{suffix}"
    workdir.mkdir(parents=True)
    record: dict[str, Any] = {"repetition": repetition + 1}
    plan = ctx.windowed
    expected = ctx.config.records if plan is None else plan.counter_expects(system)
    tally_path = workdir / "tally.json"
    windowed_args = (
        []
        if plan is None
        else ["--windowed", "updates" if system.updates else "final", "--results", str(tally_path)]
    )
    counter = subprocess.Popen(
        [
            sys.executable,
            str(PEERS_DIR / "counter.py"),
            "--bootstrap",
            ctx.settings.bootstrap_servers,
            "--topic",
            output,
            "--partitions",
            str(PARTITIONS),
            "--expected",
            str(expected),
            "--timeout",
            str(ctx.config.run_timeout_s),
            *windowed_args,
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    process: subprocess.Popen[bytes] | None = None
    try:
        assert counter.stdin is not None and counter.stdout is not None
        if counter.stdout.readline().strip() != "ready":
            raise RuntimeError("the output counter did not start")
        command = [
            ctx.pythons[system.name],
            str(PEERS_DIR / system.script),
            "--bootstrap",
            ctx.settings.bootstrap_servers,
            "--input",
            ctx.input_topic,
            "--output",
            output,
            "--group",
            group,
            "--workdir",
            str(workdir),
            "--policy",
            "cameo",
        ]
        started = time.monotonic()
        with log.open("wb") as log_file:
            process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                cwd=workdir,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        counter.stdin.write(f"pid {process.pid}\n")
        counter.stdin.flush()
        line = counter.stdout.readline()
        counter.wait(30)
        seen = json.loads(line) if line.strip() else {"outputs": 0, "timed_out": True}
        record["outputs"] = seen["outputs"]
        if plan is not None:
            record.update(_judge_windows(plan, system, tally_path))
        if seen.get("last_at") is None or seen.get("first_at") is None:
            why = "exited early" if seen.get("system_exited") else "timed out"
            record["error"] = (
                f"{system.name} {why} after {seen['outputs']} of {expected} outputs; "
                f"last lines of {log}:\n{_tail(log)}"
            )
            return record
        record["startup_s"] = round(seen["first_at"] - started, 3)
        counted = None if plan is None or system.updates else plan.counted
        record.update(
            run_rates(
                seen["outputs"],
                seen["first_at"],
                seen["last_at"],
                seen["cpu_first_s"],
                seen["cpu_last_s"],
                counted=counted,
            )
        )
        return record
    finally:
        if process is not None:
            stop_process(process)
        if counter.poll() is None:
            counter.kill()
            counter.wait(10)
        with contextlib.suppress(Exception):
            delete_topics(admin, [output])


def _judge_windows(plan: WindowedPlan, system: SystemSpec, tally_path: Path) -> dict[str, Any]:
    """The run's window results against the brute-force counts (all wrong if the counter wrote none)."""
    try:
        tally = WindowTally.from_json(json.loads(tally_path.read_text()))
    except (OSError, ValueError, KeyError) as exc:
        return {"results_correct": False, "results_error": f"no readable results from the counter: {exc}"}
    return {
        "results_mode": "updates (largest count per window)" if system.updates else "final",
        "result_outputs": tally.outputs,
        **plan.judge(system, tally),
    }


def _policy_note(logs: Path) -> str | None:
    """What the cadenza worker said about its policy (it prints one line at start)."""
    for log in sorted(logs.glob("cadenza-rep*.log")):
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith("cadenza worker policy="):
                return line.removeprefix("cadenza worker policy=")
    return None


@contextlib.contextmanager
def _broker(bootstrap: str | None, progress: Progress) -> Iterator[KafkaSettings]:
    if bootstrap:
        yield KafkaSettings.load(bootstrap_servers=bootstrap)
        return
    from cadenza.infra.broker.embedded import EmbeddedBroker  # noqa: PLC0415

    with EmbeddedBroker() as broker:
        progress(f"embedded broker at {broker.bootstrap_servers}")
        yield KafkaSettings.load(bootstrap_servers=broker.bootstrap_servers)


def run_benchmark(
    out: Path,
    *,
    quick: bool = False,
    bootstrap: str | None = None,
    records: int | None = None,
    repetitions: int | None = None,
    systems: Sequence[str] | None = None,
    workload: str = "map",
    progress: Progress = print,
) -> dict[str, Any]:
    """Run the whole benchmark, write ``out/throughput.json`` and ``out/throughput.png`` (the windowed
    workload: ``throughput-windowed.*``); the result."""
    if workload not in WORKLOADS:
        raise ValueError(f"unknown workload {workload!r}; known: {', '.join(WORKLOADS)}")
    config = config_for(quick, records, repetitions)
    specs = SYSTEMS if workload == "map" else WINDOWED_SYSTEMS
    chosen = [s for s in specs if systems is None or s.name in systems]
    unknown = set(systems or ()) - {s.name for s in specs}
    if unknown:
        raise ValueError(
            f"unknown systems {sorted(unknown)} for the {workload} workload; known: "
            f"{', '.join(s.name for s in specs)}"
        )
    pythons: dict[str, str] = {}
    for system in chosen:
        if system.peer is None:
            pythons[system.name] = sys.executable
        else:
            progress(f"{system.name}: checking its venv")
            pythons[system.name] = str(
                ensure_peer_env(system.peer, progress=lambda text: progress(f"  {text}"))
            )
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    runs: dict[str, list[dict[str, Any]]] = {s.name: [] for s in chosen}
    by_name = {s.name: s for s in chosen}
    with _broker(bootstrap, progress) as settings, tempfile.TemporaryDirectory(prefix="cadenza-tp-") as tmp:
        input_topic = f"bench-tp-in-{uuid.uuid4().hex[:8]}"
        ensure_topics(make_admin(settings), [TopicSpec(input_topic, PARTITIONS, configs=INPUT_CONFIGS)])
        progress(f"producing {config.records:,} seeded records to {input_topic} ({PARTITIONS} partitions)")
        plan = None
        if workload == "map":
            produce_input(settings, input_topic, config.records, SEED)
        else:
            windowed_records = make_windowed_records(config.records, SEED, PARTITIONS)
            plan = WindowedPlan.of(windowed_records)
            produce_windowed_input(settings, input_topic, windowed_records)
            progress(f"  {len(plan.expected):,} (key, window) results expected")
        ctx = _Context(settings, input_topic, config, pythons, logs, Path(tmp), plan)
        try:
            for rep in range(config.repetitions):
                for name in run_order([s.name for s in chosen], rep):
                    progress(f"[rep {rep + 1}/{config.repetitions}] {name}: running")
                    run = run_one(by_name[name], rep, ctx)
                    runs[name].append(run)
                    if "error" in run:
                        progress(f"[rep {rep + 1}/{config.repetitions}] {name}: FAILED: {run['error']}")
                    else:
                        correct = "" if plan is None else f", results correct: {run['results_correct']}"
                        progress(
                            f"[rep {rep + 1}/{config.repetitions}] {name}: {run['rps']:,.0f} records/s "
                            f"({run['seconds']:.1f} s, {run['rps_per_cpu_s'] or 0:,.0f} records per CPU s, "
                            f"start-up {run['startup_s']:.1f} s{correct})"
                        )
        finally:
            with contextlib.suppress(Exception):
                delete_topics(make_admin(settings), [input_topic])
    bench_settings = {
        "records": config.records,
        "repetitions": config.repetitions,
        "quick": config.quick,
        "partitions": PARTITIONS,
        "seed": SEED,
        "broker": "external" if bootstrap else "embedded",
        "pipeline": "parse JSON -> map (peers.workload.transform) -> produce JSON",
        "cadenza_policy": _policy_note(logs),
        "peer_pins": {s.name: list(s.peer.pins) for s in chosen if s.peer is not None},
    }
    if plan is not None:
        bench_settings.update(_windowed_settings(plan, chosen))
    result = build_result(runs, environment(), bench_settings, workload)
    stem = "throughput" if workload == "map" else f"throughput-{workload}"
    write_result(out, f"{stem}.json", result)
    png = plot(result, out / f"{stem}.png")
    progress(f"wrote {png}")
    return result


def _windowed_settings(plan: WindowedPlan, chosen: Sequence[SystemSpec]) -> dict[str, Any]:
    from peers import windowed  # noqa: PLC0415 - the constants, named where they are recorded

    return {
        "title": "count per key, 1 s tumbling event-time windows",
        "pipeline": (
            "parse JSON -> key (record key, 1,000 users; input partitioned by it) -> event time (ts) -> "
            f"count per {windowed.WINDOW_MS} ms tumbling window -> produce one result per (key, window)"
        ),
        "window_ms": windowed.WINDOW_MS,
        "max_out_of_orderness_ms": windowed.MAX_OUT_OF_ORDERNESS_MS,
        "event_time_jitter_ms": windowed.JITTER_MS,
        "records_per_event_second": windowed.RECORDS_PER_EVENT_SECOND,
        "flush_records": PARTITIONS,
        "windows_expected": len(plan.expected),
        "records_counted_for_final_results": plan.counted,
        "results": {s.name: "updates" if s.updates else "final" for s in chosen},
        "rate": (
            "input records per second from the first result to the last: for a system emitting final "
            "results, the input records at or past the first window's close point over that time (the "
            "first result cannot come earlier, and the last window closes at the flush records); for a "
            "system emitting an update per input record (faust), (updates - 1) over that time, as in the "
            "map workload"
        ),
    }


def format_table(result: dict[str, Any]) -> str:
    """A plain-text summary, one line per system."""
    lines = [f"{'system':<12} {'rps median':>11} {'min':>9} {'max':>9} {'rps/cpu-s':>10}"]
    for name, entry in result["systems"].items():
        correct = f" results correct: {entry['results_correct']}" if "results_correct" in entry else ""
        if entry["rps"] is None:
            lines.append(f"{name:<12} {'failed':>11}{correct}")
            continue
        per_cpu = entry["rps_per_cpu_s"]
        lines.append(
            f"{name:<12} {entry['rps']:>11,.0f} {entry['rps_min']:>9,.0f} {entry['rps_max']:>9,.0f} "
            f"{per_cpu if per_cpu is None else format(per_cpu, ',.0f'):>10}{correct}"
        )
    for ratio, value in result.get("ratios", {}).items():
        lines.append(f"{ratio}: {value}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--quick", action="store_true", help="one repetition of a smaller input")
    parser.add_argument("--bootstrap", default=None, help="an existing broker instead of the embedded one")
    parser.add_argument("--records", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--repetitions", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--systems", default=None, help="comma-separated subset (default: all)")
    parser.add_argument(
        "--workload",
        choices=WORKLOADS,
        default="map",
        help="map: parse -> map -> produce; windowed: count per key in 1 s tumbling event-time windows",
    )
    args = parser.parse_args(argv)
    systems = args.systems.split(",") if args.systems else None
    try:
        result = run_benchmark(
            args.out,
            quick=args.quick,
            bootstrap=args.bootstrap,
            records=args.records,
            repetitions=args.repetitions,
            systems=systems,
            workload=args.workload,
            progress=lambda line: print(line, flush=True),
        )
    except (PeerInstallError, ValueError) as exc:
        raise SystemExit(str(exc)) from None
    print(format_table(result))


if __name__ == "__main__":
    main()
