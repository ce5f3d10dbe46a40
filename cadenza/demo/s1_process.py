"""The processes of an S1 run: the system under test (a cadenza worker under a policy, or a peer
system's command), the CPU it and the broker used, and the broker itself.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from cadenza.demo.machine import machine_busy_seconds, process_cpu_seconds
from cadenza.demo.s1_config import PARTITIONS, S1Config
from cadenza.demo.s1_io import Topics
from cadenza.infra.broker.embedded import EmbeddedBroker
from cadenza.settings import KafkaSettings

#: The pipelines module every cadenza worker of S1 runs (an importable name: works from a wheel too).
PIPELINES_MODULE = "cadenza.demo.s1_pipelines"


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
    *,
    pipelines: str = PIPELINES_MODULE,
    extra_env: Mapping[str, str] | None = None,
) -> Iterator[subprocess.Popen[bytes]]:
    """A process running S1: ``peer``'s command if given, else a cadenza worker under policy ``system``.

    A scenario built on S1's harness (S6) runs its own ``pipelines`` module (an importable name, so
    that a process lessee can import the functions it is sent) with ``extra_env`` on top: its own
    topics and the worker's settings.
    """
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
        env.update(extra_env or {})
        command = [
            sys.executable,
            "-m",
            "cadenza",
            "worker",
            pipelines,
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
    def take(cls, system_pid: int | None, broker_pid: int | None, *, children: bool = False) -> CpuSample:
        """``children``: count the system's child processes too (a worker's process lessees do its
        work in them)."""
        system = process_tree_cpu_seconds(system_pid) if children else process_cpu_seconds(system_pid)
        return cls(time.monotonic(), system, process_cpu_seconds(broker_pid), machine_busy_seconds())

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


def process_tree_cpu_seconds(pid: int | None) -> float | None:
    """CPU seconds process ``pid`` and its descendants have used so far (Linux ``/proc``): its own,
    the children it has reaped, and each live descendant's own and reaped; ``None`` as
    :func:`~cadenza.demo.machine.process_cpu_seconds` gives it.

    A descendant's seconds pass into its parent's reaped children's when it exits and is waited
    for, so the sum carries on across a lessee that is started and stopped between two samples.
    """
    if pid is None:
        return None
    tick = os.sysconf("SC_CLK_TCK")
    stats: dict[int, tuple[int, float]] = {}  # pid -> (parent, own and reaped children's seconds)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        stats[int(entry.name)] = (int(fields[1]), sum(int(f) for f in fields[11:15]) / tick)
    if pid not in stats:
        return None
    children: dict[int, list[int]] = {}
    for child, (parent, _) in stats.items():
        children.setdefault(parent, []).append(child)
    total, todo = 0.0, [pid]
    while todo:
        current = todo.pop()
        total += stats[current][1]
        todo.extend(children.get(current, []))
    return total


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


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
