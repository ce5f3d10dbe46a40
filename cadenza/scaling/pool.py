"""``cadenza pool``: run ``cadenza worker`` processes in one group and size them with DS2.

The pool is the embedded deployment of the controller: every policy interval it scrapes each
worker's rate gauges, measures how fast records arrive on the source topics (end offsets over time),
asks :class:`~cadenza.scaling.PoolController` for a worker count and starts or stops processes to
match. Each decision is logged with its inputs, published on the feedback topic (JSON, marked with
the ``cadenza-kind: pool-decision`` header so workers skip it) and exported as
``cadenza_pool_desired_workers`` / ``cadenza_pool_workers``. On Kubernetes the same decision drives a
Deployment through an HPA on the desired-workers metric (see ``docker/k8s/``).

The same rates are on the feedback topic when the workers have one (``--feedback-topic``): each worker
publishes every rate window there (header ``cadenza-kind: true-rates``, key its worker id; read with
:func:`cadenza.scaling.rates.parse_true_rates`). The pool still scrapes: a scrape needs no topic, and it
reaches workers that were given none.

Workers stop with SIGTERM, so a scale-in hands their partitions over cleanly (commit, leave group).

With ``migration`` other than ``group`` the workers run in plan ownership
(:mod:`cadenza.scaling.ownership`) and the pool moves their partitions itself: a scale-out starts the
new workers and then moves to each topic's partitions spread evenly over the pool
(:func:`~cadenza.scaling.migration.balanced`) by ``plan(current, target, migration)``, warm and a step
at a time (:class:`~cadenza.scaling.handover.PlanMover`); a scale-in first moves everything off the
workers that go, then stops them, so they own nothing when they stop. A worker that exits on its
own has its partitions given to the others outright (restored from the changelogs).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import Protocol

from cadenza.errors import ConfigError
from cadenza.feedback.records import KIND_HEADER, POOL_DECISION_KIND
from cadenza.infra.kafka.clients import make_admin, make_producer
from cadenza.infra.kafka.errors import KafkaClientError
from cadenza.infra.kafka.offsets import end_offsets
from cadenza.infra.metrics import names
from cadenza.infra.metrics.prometheus import PrometheusExporter
from cadenza.infra.metrics.scrape import fetch
from cadenza.scaling.controller import PoolDecision, RateWindow
from cadenza.scaling.ds2 import InstanceRates
from cadenza.scaling.handover import PlanMover
from cadenza.scaling.migration import STRATEGIES, balanced
from cadenza.scaling.observe import Dataflow, SubKey, parse_rates, rate_window
from cadenza.scheduling.clock import Clock
from cadenza.settings import KafkaSettings

__all__ = ["POOL_DECISION_KIND", "Controller", "Pool", "ServiceWorkers", "WorkerProcesses", "wait_processes"]

_log = logging.getLogger(__name__)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Controller(Protocol):
    """What the pool needs of a controller (DS2's, or the threshold baseline)."""

    @property
    def workers(self) -> int: ...

    def reconfigured(self, workers: int) -> None: ...

    def evaluate(self, window: RateWindow) -> PoolDecision: ...


@dataclass
class _Process:
    popen: subprocess.Popen[bytes]
    port: int
    #: The worker's id (``--worker-id``): its name in the ownership plan.
    name: str = ""


@dataclass
class WorkerProcesses:
    """``cadenza worker`` child processes, newest last; scale-in stops the newest first."""

    worker_args: Sequence[str]
    env: Mapping[str, str] | None = None
    """The workers' environment (None: the pool's own)."""
    stop_timeout: float = 30.0
    ownership_plan: bool = False
    """Start the workers in plan ownership (``--ownership plan``), each with a stable ``--worker-id``
    (``w1``, ``w2``, ...: the lowest free one, so a replacement takes the place of the worker it
    replaces)."""
    processes: list[_Process] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.processes)

    def names(self) -> list[str]:
        """The workers' ids, oldest first (scale-in stops the last ones)."""
        return [p.name for p in self.processes]

    def urls(self) -> list[str]:
        return [f"http://127.0.0.1:{p.port}/metrics" for p in self.processes]

    def reap(self) -> int:
        """Forget processes that exited on their own; how many did."""
        alive = [p for p in self.processes if p.popen.poll() is None]
        gone = len(self.processes) - len(alive)
        for p in self.processes:
            if p not in alive:
                _log.warning("worker on port %d exited with %s", p.port, p.popen.returncode)
        self.processes = alive
        return gone

    def scale_to(self, count: int) -> None:
        while len(self.processes) < count:
            port = _free_port()
            taken = set(self.names())
            name = next(f"w{n}" for n in range(1, len(taken) + 2) if f"w{n}" not in taken)
            command = [
                sys.executable,
                "-m",
                "cadenza",
                "worker",
                *self.worker_args,
                "--metrics-port",
                str(port),
                "--worker-id",
                name,
            ]
            if self.ownership_plan:
                command += ["--ownership", "plan"]
            env = None if self.env is None else dict(self.env)
            popen = subprocess.Popen(command, stdout=subprocess.DEVNULL, env=env)
            self.processes.append(_Process(popen, port, name))
            _log.info("started worker pid %d (metrics port %d)", popen.pid, port)
        stopping = self.processes[count:]
        self.processes = self.processes[:count]
        for p in stopping:
            p.popen.send_signal(signal.SIGTERM)
        for p in stopping:
            try:
                p.popen.wait(self.stop_timeout)
            except subprocess.TimeoutExpired:
                _log.warning(
                    "worker pid %d ignored SIGTERM for %.0fs: killing it", p.popen.pid, self.stop_timeout
                )
                p.popen.kill()
                p.popen.wait()
            _log.info("stopped worker pid %d (exit %s)", p.popen.pid, p.popen.returncode)

    def stop_all(self) -> None:
        self.scale_to(0)


@dataclass
class ServiceWorkers:
    """Workers someone else runs (a Kubernetes Deployment), found through a headless Service's DNS.

    The controller only observes and decides here: the HPA on ``cadenza_pool_desired_workers``
    changes the replicas, so :meth:`scale_to` does nothing and the count is what DNS answers.
    """

    host: str
    port: int
    _addresses: list[str] = field(default_factory=list)

    def _resolve(self) -> list[str]:
        try:
            infos = socket.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)
        except OSError as exc:
            _log.warning("cannot resolve worker service %s: %s", self.host, exc)
            return []
        return sorted({str(info[4][0]) for info in infos})

    def __len__(self) -> int:
        return len(self._addresses)

    def urls(self) -> list[str]:
        return [
            f"http://[{a}]:{self.port}/metrics" if ":" in a else f"http://{a}:{self.port}/metrics"
            for a in self._addresses
        ]

    def reap(self) -> int:
        """Re-resolve; a change in the number of workers counts as a reconfiguration."""
        before = len(self._addresses)
        self._addresses = self._resolve()
        return abs(len(self._addresses) - before)

    def scale_to(self, count: int) -> None:
        _log.info("desired workers: %d (applied by the HPA, not by this process)", count)

    def stop_all(self) -> None:
        return


@dataclass(eq=False, repr=False)
class Pool:
    """One controller, its worker processes, and the loop that joins them.

    ``exporter``: where the pool's own series go (a fresh :class:`PrometheusExporter` by default).
    """

    settings: KafkaSettings
    group: str
    flow: Dataflow
    controller: Controller
    processes: WorkerProcesses | ServiceWorkers
    _: KW_ONLY
    clock: Clock
    interval_s: float
    feedback_topic: str | None = None
    exporter: PrometheusExporter = field(default_factory=PrometheusExporter)
    migration: str = "group"
    """``group``: partitions move by the consumer group's rebalances; ``all``, ``fluid`` or
    ``matching``: by the ownership plan, with that :func:`~cadenza.scaling.plan` strategy (the
    workers must then run in plan ownership: ``WorkerProcesses(ownership_plan=True)``)."""
    decisions: list[PoolDecision] = field(default_factory=list, init=False)
    #: The last window the controller saw (for benchmarks and debugging).
    last_window: RateWindow | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.exporter.register_callback(names.POOL_DESIRED_WORKERS, lambda: self.controller.workers)
        self.exporter.register_callback(names.POOL_WORKERS, lambda: len(self.processes))
        self._producer = make_producer(self.settings)[0] if self.feedback_topic is not None else None
        self._last_ends: tuple[float, dict[str, int]] | None = None
        self._partitions: dict[str, int] = {}
        if self.migration != "group" and self.migration not in STRATEGIES:
            raise ConfigError(f"migration must be 'group' or one of {STRATEGIES}, got {self.migration!r}")
        plan_workers = isinstance(self.processes, WorkerProcesses) and self.processes.ownership_plan
        if (self.migration != "group") != plan_workers:
            raise ConfigError(
                "migration by the ownership plan needs workers in plan ownership and the other way round "
                f"(migration {self.migration!r}; WorkerProcesses(ownership_plan=...) must match)"
            )
        self._mover = PlanMover(self.settings, self.group) if plan_workers else None

    def _input_partitions(self, timeout: float = 60.0) -> list[tuple[str, int]]:
        """Every input partition of the sub-topologies, once the workers created their topics."""
        topics = sorted({topic for _, topic in self.flow.sub_topologies.values()})
        deadline = time.monotonic() + timeout
        while not set(topics) <= self._topic_partitions().keys():
            if time.monotonic() > deadline:
                missing = sorted(set(topics) - self._partitions.keys())
                raise KafkaClientError(f"input topics {missing} do not exist after {timeout:g} s")
            self._partitions = {}  # read the metadata again
            time.sleep(0.5)
        return [(topic, p) for topic in topics for p in range(self._partitions[topic])]

    def _rebalance_plan(self, workers: Sequence[str]) -> None:
        """Move the plan to each topic spread evenly over ``workers``: partitions without a live owner
        are given outright (restored), the others move warm by the pool's migration strategy."""
        mover = self._mover
        if mover is None:
            return
        owners = mover.owners()
        partitions = self._input_partitions()
        live = set(self.processes.names()) if isinstance(self.processes, WorkerProcesses) else set()
        orphans = [p for p in partitions if owners.get(p) not in live]
        target = balanced({p: "" if p in orphans else owners[p] for p in partitions}, workers)
        if orphans:
            _log.info("giving %d partition(s) without a live owner to the pool", len(orphans))
            mover.place({p: target[p] for p in orphans})
        for moves, took in mover.migrate(target, self.migration):
            _log.info(
                "moved %s in %.2f s", ", ".join(f"{t}[{p}] -> {w}" for (t, p), w in moves.items()), took
            )

    def _resize(self, count: int) -> None:
        processes = self.processes
        if not isinstance(processes, WorkerProcesses):
            return
        if self._mover is None:
            processes.scale_to(count)
        elif count > len(processes):
            processes.scale_to(count)
            self._rebalance_plan(processes.names())
        else:  # the workers that go own nothing when they stop
            self._rebalance_plan(processes.names()[:count])
            processes.scale_to(count)

    def _topic_partitions(self) -> dict[str, int]:
        topics = {*self.flow.sources.values(), *(topic for _, topic in self.flow.sub_topologies.values())}
        if not topics <= self._partitions.keys():
            metadata = make_admin(self.settings).list_topics(timeout=10)
            self._partitions = {
                name: len(meta.partitions) for name, meta in metadata.topics.items() if meta.partitions
            }
        return self._partitions

    def arrival_rates(self) -> dict[str, float] | None:
        """Records per second appended to each source topic since the last call (None the first time)."""
        partitions = self._topic_partitions()
        pairs = [(t, p) for t in set(self.flow.sources.values()) for p in range(partitions.get(t, 0))]
        now = self.clock.now()
        ends: dict[str, int] = {}
        for (topic, _), end in end_offsets(self.settings, pairs).items():
            ends[topic] = ends.get(topic, 0) + end
        last, self._last_ends = self._last_ends, (now, ends)
        if last is None or now <= last[0]:
            return None
        return {t: max(0, ends[t] - last[1].get(t, 0)) / (now - last[0]) for t in ends}

    def _scrape(self) -> list[Mapping[SubKey, InstanceRates]]:
        rates: list[Mapping[SubKey, InstanceRates]] = []
        for url in self.processes.urls():
            try:
                rates.append(parse_rates(fetch(url, timeout=2.0)))
            except OSError as exc:  # a worker still starting or just stopped: it has no rates yet
                _log.debug("no metrics from %s: %s", url, exc)
        return rates

    def step(self) -> PoolDecision | None:
        """One evaluation: observe, decide, log, publish, apply. None while nothing can be decided."""
        if self.processes.reap():
            self.controller.reconfigured(len(self.processes))
            if isinstance(self.processes, WorkerProcesses) and self.processes.names():
                self._rebalance_plan(self.processes.names())
        try:
            arrivals = self.arrival_rates()
        except KafkaClientError as exc:
            # A broker too slow to answer this once must not stop the pool (and its workers): the
            # window is skipped, and the next one measures arrivals from the last ends it read.
            _log.warning("no decision this window: arrival rates unavailable: %s", exc)
            return None
        workers = self._scrape()
        if arrivals is None:
            return None
        window = rate_window(self.flow, workers, arrivals, self._topic_partitions())
        self.last_window = window
        try:
            decision = self.controller.evaluate(window)
        except ValueError as exc:
            _log.warning("no decision this window: %s", exc)
            return None
        record = {
            **decision.as_dict(),
            "group": self.group,
            "arrival_rates": arrivals,
            # the measured rates DS2 decided from: one entry per instance that did useful work
            "rates": {
                name: [dataclasses.asdict(r) for r in instances]
                for name, instances in window.rates.items()
                if name in self.flow.sub_topologies
            },
        }
        _log.info("pool decision %s", json.dumps(record, sort_keys=True))
        self.decisions.append(decision)
        if self._producer is not None and self.feedback_topic is not None:
            self._producer.produce(
                self.feedback_topic,
                json.dumps(record, sort_keys=True).encode(),
                f"pool:{self.group}".encode(),
                headers=[(KIND_HEADER, POOL_DECISION_KIND)],
            )
            self._producer.poll(0)
        if decision.desired != len(self.processes):
            self._resize(decision.desired)
        return decision

    def start(self) -> None:
        """Start the controller's workers (and, under plan ownership, give them the partitions)."""
        if isinstance(self.processes, WorkerProcesses):
            self.processes.scale_to(self.controller.workers)
            self._rebalance_plan(self.processes.names())
        else:
            self.processes.reap()
        self.controller.reconfigured(max(1, len(self.processes)))

    def run(self, stop: threading.Event) -> None:
        """Start, then evaluate every interval until ``stop`` is set."""
        try:
            self.start()
            while not stop.wait(self.interval_s):
                self.step()
        finally:
            self.close()

    def close(self) -> None:
        """Stop the workers and release the pool's clients."""
        self.processes.stop_all()
        if self._producer is not None:
            self._producer.flush(10)
        if self._mover is not None:
            self._mover.close()
            self._mover = None


def wait_processes(processes: WorkerProcesses, timeout: float) -> None:
    """Wait until every worker serves its metrics (for tests and the CLI's first report)."""
    deadline = time.monotonic() + timeout
    for url in processes.urls():
        while True:
            try:
                with urllib.request.urlopen(url, timeout=1.0):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"worker metrics at {url} not up within {timeout}s") from None
                time.sleep(0.2)
