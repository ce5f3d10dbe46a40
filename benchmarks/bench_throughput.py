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
``rps_per_cpu_s`` and every run. ``--quick``: one repetition of a smaller input, a few minutes at most.

    python benchmarks/bench_throughput.py --out DIR [--quick] [--bootstrap host:port]
    cadenza bench throughput --out DIR [--quick] [--bootstrap host:port]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import environment, write_result
from peers.venvs import FAUST, QUIXSTREAMS, PeerEnv, PeerInstallError, ensure_peer_env
from peers.workload import make_records

from cadenza.infra.kafka.clients import DeliveryReport, flush_or_raise, make_admin, make_producer
from cadenza.infra.kafka.topics import TopicSpec, delete_topics, ensure_topics
from cadenza.settings import KafkaSettings

__all__ = [
    "SYSTEMS",
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
Progress = Callable[[str], None]


@dataclass(frozen=True)
class SystemSpec:
    """A system under test: its app script and, for a peer, the venv it runs from (None: this venv)."""

    name: str
    script: str
    peer: PeerEnv | None = None


SYSTEMS: tuple[SystemSpec, ...] = (
    SystemSpec("cadenza", "cadenza_throughput.py"),
    SystemSpec("faust", "faust_throughput.py", FAUST),
    SystemSpec("quixstreams", "quix_throughput.py", QUIXSTREAMS),
    SystemSpec("raw", "raw_throughput.py"),
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
    outputs: int, first_at: float, last_at: float, cpu_first_s: float | None, cpu_last_s: float | None
) -> dict[str, float | None]:
    """rps and rps per CPU second of one run, over the window from the first output to the last."""
    if outputs < 2:
        raise ValueError(f"a rate needs at least two outputs, got {outputs}")
    counted = outputs - 1
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
    if not good:
        return {"rps": None, "rps_min": None, "rps_max": None, "rps_per_cpu_s": None, "runs": list(runs)}
    rates = [float(run["rps"]) for run in good]
    per_cpu = [float(run["rps_per_cpu_s"]) for run in good if run.get("rps_per_cpu_s") is not None]
    return {
        "rps": round(statistics.median(rates), 1),
        "rps_min": round(min(rates), 1),
        "rps_max": round(max(rates), 1),
        "rps_per_cpu_s": round(statistics.median(per_cpu), 1) if per_cpu else None,
        "runs": list(runs),
    }


def build_result(
    runs: dict[str, list[dict[str, Any]]], env: dict[str, object], settings: dict[str, Any]
) -> dict[str, Any]:
    """The throughput.json document: per system a summary, then the machine, the commit and the settings."""
    machine = {k: v for k, v in env.items() if k != "commit"}
    systems = {name: summarize(system_runs) for name, system_runs in runs.items()}
    ratios: dict[str, float | None] = {}
    cadenza = systems.get("cadenza", {}).get("rps")
    for peer in ("faust", "quixstreams", "raw"):
        other = systems.get(peer, {}).get("rps")
        ratios[f"cadenza_over_{peer}"] = round(cadenza / other, 3) if cadenza and other else None
    return {
        "benchmark": "throughput",
        "systems": systems,
        "ratios": ratios,
        "settings": settings,
        "machine": machine,
        "commit": str(env.get("commit", "unknown")),
    }


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
    fig.suptitle(
        f"parse JSON -> map -> produce, {settings.get('records', '?'):,} records, {PARTITIONS} partitions, "
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
    producer, errors = make_producer(settings, **{"linger.ms": 20, "batch.num.messages": 10000})
    report = DeliveryReport()
    for i, (key, value) in enumerate(make_records(records, seed)):
        while True:
            try:
                producer.produce(topic, value, key, partition=i % PARTITIONS, on_delivery=report)
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


def _stop(process: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)


@dataclass
class _Context:
    settings: KafkaSettings
    input_topic: str
    config: BenchConfig
    pythons: dict[str, str]
    logs: Path
    workdir: Path


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
            str(ctx.config.records),
            "--timeout",
            str(ctx.config.run_timeout_s),
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
        if seen.get("last_at") is None or seen.get("first_at") is None:
            why = "exited early" if seen.get("system_exited") else "timed out"
            record["error"] = (
                f"{system.name} {why} after {seen['outputs']} of {ctx.config.records} outputs; "
                f"last lines of {log}:\n{_tail(log)}"
            )
            return record
        record["startup_s"] = round(seen["first_at"] - started, 3)
        record.update(
            run_rates(
                seen["outputs"], seen["first_at"], seen["last_at"], seen["cpu_first_s"], seen["cpu_last_s"]
            )
        )
        return record
    finally:
        if process is not None:
            _stop(process)
        if counter.poll() is None:
            counter.kill()
            counter.wait(10)
        with contextlib.suppress(Exception):
            delete_topics(admin, [output])


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
    progress: Progress = print,
) -> dict[str, Any]:
    """Run the whole benchmark, write ``out/throughput.json`` and ``out/throughput.png``; the result."""
    config = config_for(quick, records, repetitions)
    chosen = [s for s in SYSTEMS if systems is None or s.name in systems]
    unknown = set(systems or ()) - {s.name for s in SYSTEMS}
    if unknown:
        raise ValueError(f"unknown systems {sorted(unknown)}; known: {', '.join(s.name for s in SYSTEMS)}")
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
        ensure_topics(make_admin(settings), [TopicSpec(input_topic, PARTITIONS)])
        progress(f"producing {config.records:,} seeded records to {input_topic} ({PARTITIONS} partitions)")
        produce_input(settings, input_topic, config.records, SEED)
        ctx = _Context(settings, input_topic, config, pythons, logs, Path(tmp))
        try:
            for rep in range(config.repetitions):
                for name in run_order([s.name for s in chosen], rep):
                    progress(f"[rep {rep + 1}/{config.repetitions}] {name}: running")
                    run = run_one(by_name[name], rep, ctx)
                    runs[name].append(run)
                    if "error" in run:
                        progress(f"[rep {rep + 1}/{config.repetitions}] {name}: FAILED: {run['error']}")
                    else:
                        progress(
                            f"[rep {rep + 1}/{config.repetitions}] {name}: {run['rps']:,.0f} records/s "
                            f"({run['seconds']:.1f} s, {run['rps_per_cpu_s'] or 0:,.0f} records per CPU s, "
                            f"start-up {run['startup_s']:.1f} s)"
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
    result = build_result(runs, environment(), bench_settings)
    write_result(out, "throughput.json", result)
    png = plot(result, out / "throughput.png")
    progress(f"wrote {png}")
    return result


def format_table(result: dict[str, Any]) -> str:
    """A plain-text summary, one line per system."""
    lines = [f"{'system':<12} {'rps median':>11} {'min':>9} {'max':>9} {'rps/cpu-s':>10}"]
    for name, entry in result["systems"].items():
        if entry["rps"] is None:
            lines.append(f"{name:<12} {'failed':>11}")
            continue
        per_cpu = entry["rps_per_cpu_s"]
        lines.append(
            f"{name:<12} {entry['rps']:>11,.0f} {entry['rps_min']:>9,.0f} {entry['rps_max']:>9,.0f} "
            f"{per_cpu if per_cpu is None else format(per_cpu, ',.0f'):>10}"
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
            progress=lambda line: print(line, flush=True),
        )
    except (PeerInstallError, ValueError) as exc:
        raise SystemExit(str(exc)) from None
    print(format_table(result))


if __name__ == "__main__":
    main()
