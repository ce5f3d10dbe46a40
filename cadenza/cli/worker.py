"""``cadenza worker``: run the pipelines of user modules until SIGINT or SIGTERM.

Every option can also be set by the ``CADENZA_*`` variable named in its help, so a container is
configured entirely from its environment; connection settings are :class:`~cadenza.settings.KafkaSettings`.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Annotated

import typer
from rich.markup import escape

from cadenza.analysis.kafka_trace import ACTIVITIES_TOPIC
from cadenza.cli.console import LogFormat, command_errors, err_console, setup_logging
from cadenza.errors import ConfigError
from cadenza.infra.metrics.discovery import DEFAULT_DISCOVERY_TOPIC, WorkerAnnouncer, advertised_url
from cadenza.infra.metrics.server import MetricsServer
from cadenza.pipelines import Pipeline, load_pipelines
from cadenza.settings import KafkaSettings
from cadenza.worker import Worker
from cadenza.worker.plans import PlanMismatchError
from cadenza.worker.supervisor import WorkerSupervisor

_log = logging.getLogger("cadenza.cli")


@command_errors
def worker_command(
    modules: Annotated[
        list[str], typer.Argument(help="Modules declaring pipelines: dotted names or .py file paths.")
    ],
    group: Annotated[
        str | None,
        typer.Option(
            envvar="CADENZA_GROUP",
            help="Consumer group of the deployment (default: cadenza-<its pipelines' names>). Every worker "
            "of a group must run the same pipelines.",
        ),
    ] = None,
    policy: Annotated[
        str,
        typer.Option(
            envvar="CADENZA_POLICY",
            help="Scheduling policy: fifo, edf, cameo, sjf, fair, or package.module:Class.",
        ),
    ] = "cameo",
    partitions: Annotated[
        int,
        typer.Option(
            min=1, envvar="CADENZA_PARTITIONS", help="Partitions for topics the worker has to create."
        ),
    ] = 4,
    batch_size: Annotated[
        int, typer.Option(min=1, envvar="CADENZA_BATCH_SIZE", help="Most records fetched per poll.")
    ] = 1000,
    max_buffered: Annotated[
        int,
        typer.Option(
            min=1,
            envvar="CADENZA_MAX_BUFFERED",
            help="Most records held in the scheduler; partitions are paused beyond it.",
        ),
    ] = 10_000,
    quantum_records: Annotated[
        int,
        typer.Option(
            min=1,
            envvar="CADENZA_QUANTUM_RECORDS",
            help="Records an operator-partition runs before priorities are re-checked.",
        ),
    ] = 16,
    quantum_ms: Annotated[
        float,
        typer.Option(
            min=0.001,
            envvar="CADENZA_QUANTUM_MS",
            help="Milliseconds an operator-partition may run before priorities are re-checked.",
        ),
    ] = 2.0,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            min=0,
            max=65535,
            envvar="CADENZA_METRICS_PORT",
            help="Serve /metrics (Prometheus), /healthz and /readyz on this port.",
        ),
    ] = None,
    metrics_host: Annotated[
        str, typer.Option(envvar="CADENZA_METRICS_HOST", help="Address the metrics port binds.")
    ] = "127.0.0.1",
    metrics_advertised_host: Annotated[
        str | None,
        typer.Option(
            envvar="CADENZA_METRICS_ADVERTISED_HOST",
            help="Host others reach the metrics port at, as announced on the discovery topic (default: "
            "--metrics-host, or the hostname when that is a wildcard such as 0.0.0.0).",
        ),
    ] = None,
    discovery_topic: Annotated[
        str,
        typer.Option(
            envvar="CADENZA_DISCOVERY_TOPIC",
            help="With --metrics-port: announce the metrics URL on this compacted topic every few seconds "
            "(for cadenza dashboard --discovery-topic); 'off' announces nothing.",
        ),
    ] = DEFAULT_DISCOVERY_TOPIC,
    spans_topic: Annotated[
        str | None,
        typer.Option(envvar="CADENZA_SPANS_TOPIC", help="Send sampled per-operator spans to this topic."),
    ] = None,
    span_sample_ratio: Annotated[
        float,
        typer.Option(
            min=0.0001,
            max=1.0,
            envvar="CADENZA_SPAN_SAMPLE_RATIO",
            help="Share of traces sent.",
        ),
    ] = 0.01,
    feedback_topic: Annotated[
        str | None,
        typer.Option(
            envvar="CADENZA_FEEDBACK_TOPIC", help="Read cost statistics of the stats job from this topic."
        ),
    ] = None,
    activities_topic: Annotated[
        str,
        typer.Option(
            envvar="CADENZA_ACTIVITIES_TOPIC",
            help="Send the worker's activity trace to this topic (for cadenza analyze); 'off' sends none.",
        ),
    ] = ACTIVITIES_TOPIC,
    state_store: Annotated[
        str,
        typer.Option(
            envvar="CADENZA_STATE_STORE",
            help="Where window and join state lives: memory, rocksdb (with --state-dir), or "
            "package.module:factory for a store factory of your own.",
        ),
    ] = "memory",
    state_dir: Annotated[
        Path | None,
        typer.Option(envvar="CADENZA_STATE_DIR", help="Directory of the rocksdb state store."),
    ] = None,
    max_restarts: Annotated[
        int,
        typer.Option(
            min=0,
            envvar="CADENZA_MAX_RESTARTS",
            help="Restarts of the worker after a Kafka client failure (a broker that came back without "
            "its producer state, say) within 10 minutes before the process exits non-zero; 0: exit at once.",
        ),
    ] = 5,
    stop_timeout: Annotated[
        float,
        typer.Option(
            min=0.1,
            envvar="CADENZA_STOP_TIMEOUT",
            help="Seconds a SIGTERM or Ctrl-C waits for the step in flight; past it (a user function that "
            "hangs) the worker leaves its group without committing that record and exits 3.",
        ),
    ] = 15.0,
    watermark_idle_timeout: Annotated[
        float,
        typer.Option(
            min=0.0,
            envvar="CADENZA_WATERMARK_IDLE_TIMEOUT",
            help="Seconds an input partition of a window or join may deliver nothing before it stops "
            "holding the watermark back (counted in cadenza_watermark_idle_timeouts_total); 0: it holds "
            "it back for ever. See docs/watermarks.md.",
        ),
    ] = 30.0,
    progress_interval_ms: Annotated[
        float,
        typer.Option(
            min=1.0,
            max=59_999.0,
            envvar="CADENZA_PROGRESS_INTERVAL_MS",
            help="Most milliseconds between the progress records a key_by writes to its repartition "
            "topic, which let the windows downstream advance when a key sends them nothing.",
        ),
    ] = 50.0,
    max_poll_interval: Annotated[
        float,
        typer.Option(
            min=1.0,
            envvar="CADENZA_MAX_POLL_INTERVAL",
            help="Seconds one user call may run before the group declares the worker's partitions lost "
            "(max.poll.interval.ms); at least the session timeout.",
        ),
    ] = 300.0,
    hang_timeout: Annotated[
        float | None,
        typer.Option(
            min=0.1,
            envvar="CADENZA_HANG_TIMEOUT",
            help="Seconds after which a running user call is pinned as a possible poison pill and logged "
            "at ERROR (default: 80% of --max-poll-interval). A record running at two deaths of the worker "
            "(a crash, an OOM kill, a hang past --max-poll-interval) is dead-lettered as quarantined.",
        ),
    ] = None,
    replace_plan: Annotated[
        bool,
        typer.Option(
            "--replace-plan",
            envvar="CADENZA_REPLACE_PLAN",
            help="Record this worker's pipelines as the group's plan even while the group has live "
            "members (an upgrade whose old workers' sessions have not expired yet). Without it a worker "
            "whose pipelines differ from its group's is refused (exit 2) until the old workers are gone.",
        ),
    ] = False,
    log_level: Annotated[
        str | None, typer.Option(help="Logging level (default: the global --log-level / CADENZA_LOG_LEVEL).")
    ] = None,
    log_format: Annotated[
        LogFormat | None,
        # Not envvar=: CADENZA_LOG_FORMAT is read by setup_logging, which warns about an unknown value
        # and logs as rich instead of refusing to start a worker over how it logs.
        typer.Option(help="rich (for people) or json (one object per line); default: $CADENZA_LOG_FORMAT."),
    ] = None,
) -> None:
    """Run every pipeline of MODULES in one consumer group, until Ctrl-C or SIGTERM.

    On a signal the worker stops fetching, commits what finished (outputs flushed first), hands the
    records still queued back to the group uncommitted, leaves the group and exits 0.
    """
    if log_level is not None or log_format is not None:
        setup_logging(log_level or os.environ.get("CADENZA_LOG_LEVEL", "WARNING"), log_format)
    # A console script does not put the working directory on sys.path; users expect
    # `cadenza worker myapp.pipelines` to find their package from where they stand.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    settings = KafkaSettings.load()
    pipelines: list[Pipeline] = []
    for module in modules:
        pipelines.extend(load_pipelines(module))

    def make_worker() -> Worker:
        return Worker(
            pipelines,
            settings,
            group=group,
            partitions=partitions,
            batch_size=batch_size,
            policy=policy,
            max_buffered=max_buffered,
            quantum_records=quantum_records,
            quantum_seconds=quantum_ms / 1000.0,
            spans_topic=spans_topic,
            span_sample_ratio=span_sample_ratio,
            feedback_topic=feedback_topic,
            activities_topic=None if activities_topic in ("", "off") else activities_topic,
            state_store=state_store,
            state_dir=state_dir,
            watermark_idle_timeout=watermark_idle_timeout or None,
            progress_interval=progress_interval_ms / 1000.0,
            replace_plan=replace_plan,
            max_poll_interval=max_poll_interval,
            hang_timeout=hang_timeout,
        )

    server: MetricsServer | None = None
    announcer: WorkerAnnouncer | None = None

    def on_worker(worker: Worker) -> None:
        # Each (re)started worker has its own registry and health state: serve the current one.
        nonlocal server, announcer
        if metrics_port is None:
            return
        if server is not None:
            server.close()
        try:
            server = worker.exporter.start_http(metrics_port, host=metrics_host)
        except OSError as exc:  # the port is taken, or the host is not this machine's
            raise ConfigError(
                f"--metrics-port {metrics_port} (CADENZA_METRICS_PORT) on {metrics_host}: "
                f"{exc.strerror or exc}; choose a free port, or stop what listens there"
            ) from None
        _say(f"metrics on {server.url}/metrics")
        url = advertised_url(metrics_advertised_host or server.host, server.port)
        if announcer is not None:
            announcer.url = url  # a restarted worker may have bound another port (--metrics-port 0)
        elif discovery_topic not in ("", "off"):
            try:
                announcer = WorkerAnnouncer(
                    settings,
                    worker_id=f"{socket.gethostname()}-{os.getpid()}",
                    url=url,
                    group=worker.group,
                    pipelines=[pipeline.name for pipeline in pipelines],
                    topic=discovery_topic,
                ).start()
            except Exception as exc:  # discovery is a convenience: the worker runs without it
                _say(f"not announcing on {discovery_topic}: {exc}")
            else:
                _say(f"announcing {url} on {discovery_topic}")

    supervisor = WorkerSupervisor(make_worker, max_restarts=max_restarts, on_worker=on_worker)

    watchdog: list[threading.Timer] = []

    def give_up() -> None:
        # The main thread is stuck in a step (a user function that hangs): a signal handler cannot
        # interrupt it, so leave the group from here and end the process, committing nothing.
        _log.error(
            "the worker did not stop within %.1f s of the signal (a step still running: a user function "
            "that hangs?); leaving the group without committing the records in flight, exiting 3",
            stop_timeout,
        )
        try:
            running = supervisor.worker
            if running is not None:
                running.abandon()
        finally:
            logging.shutdown()
            os._exit(3)

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        supervisor.stop()
        if not watchdog:
            timer = threading.Timer(stop_timeout, give_up)
            timer.daemon = True
            watchdog.append(timer)
            timer.start()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        # The first worker is started here, outside the supervisor: a failure before it ever joined
        # the group (no broker at that address, a topic of the wrong shape) is the user's to fix.
        worker = make_worker()
        on_worker(worker)
        worker.start()
        # Plain writes, not rich: topic names are long and must not be re-wrapped to the terminal.
        _say(f"cadenza worker at {settings.bootstrap_servers}")
        _say(worker.describe())
        _say("running; Ctrl-C or SIGTERM stops")
        worker = supervisor.run(worker)
    except PlanMismatchError as exc:
        # Not a crash but a deployment mistake (also at an in-place restart after the group's plan was
        # replaced), told apart from other failures by its exit code.
        err_console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
        raise typer.Exit(2) from None
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if announcer is not None:
            announcer.close()  # the tombstone: dashboards drop this worker now, not after a timeout
        for timer in watchdog:
            timer.cancel()
        if server is not None:
            server.close()
    counts = ", ".join(f"{name}={value}" for name, value in worker.counters.snapshot().items())
    _say(f"stopped: {counts}")


def _say(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()
