"""``cadenza worker``: run the pipelines of user modules until SIGINT or SIGTERM.

The options are built from :class:`~cadenza.worker.config.WorkerConfig` (name, ``CADENZA_*`` variable,
default, bounds, unit and help), so a setting is declared once for the CLI, ``Worker(config=...)`` and
the docs' settings reference; a container is configured entirely from its environment. Connection
settings are :class:`~cadenza.settings.KafkaSettings`.
"""

from __future__ import annotations

import inspect
import logging
import os
import signal
import sys
import threading
from types import FrameType
from typing import Annotated, Any

import typer
from pydantic.fields import FieldInfo
from rich.markup import escape

from cadenza.cli.console import LogFormat, err_console, setup_logging, user_errors
from cadenza.errors import ConfigError
from cadenza.infra.metrics.server import MetricsServer
from cadenza.pipelines import Pipeline, load_pipelines
from cadenza.settings import KafkaSettings
from cadenza.worker import Worker
from cadenza.worker.announcer import WorkerAnnouncer, advertised_url
from cadenza.worker.config import ENV_PREFIX, OFF, WorkerConfig, bounds, unit
from cadenza.worker.kafka.group_plan import PlanMismatchError
from cadenza.worker.supervisor import WorkerSupervisor

_log = logging.getLogger("cadenza.cli")


def _option(name: str, field: FieldInfo) -> inspect.Parameter:
    """A ``--name`` option of ``cadenza worker`` from a WorkerConfig field: its variable, default,
    inclusive bounds (exclusive ones are checked by the config) and help with the unit."""
    limits = bounds(field)
    help_text = str(field.description)
    if unit(field):
        help_text += f" Unit: {unit(field)}."
    option = typer.Option(
        f"--{name.replace('_', '-')}",
        envvar=f"{ENV_PREFIX}{name.upper()}",
        help=help_text,
        min=limits.get("ge"),
        max=limits.get("le"),
    )
    return inspect.Parameter(
        name,
        inspect.Parameter.KEYWORD_ONLY,
        default=field.default,
        annotation=Annotated[field.annotation, option],
    )


def worker_command(
    modules: Annotated[
        list[str], typer.Argument(help="Modules declaring pipelines: dotted names or .py file paths.")
    ],
    *,
    log_level: Annotated[
        str | None, typer.Option(help="Logging level (default: the global --log-level / CADENZA_LOG_LEVEL).")
    ] = None,
    log_format: Annotated[
        LogFormat | None,
        # Not envvar=: CADENZA_LOG_FORMAT is read by setup_logging, which warns about an unknown value
        # and logs as rich instead of refusing to start a worker over how it logs.
        typer.Option(help="rich (for people) or json (one object per line); default: $CADENZA_LOG_FORMAT."),
    ] = None,
    **settings: Any,
) -> None:
    """Run every pipeline of MODULES in one consumer group, until Ctrl-C or SIGTERM.

    On a signal the worker stops fetching, commits what finished (outputs flushed first), hands the
    records still queued back to the group uncommitted, leaves the group and exits 0.
    """
    with user_errors():
        _run(modules, log_level, log_format, WorkerConfig.load(**settings))


# typer reads the options from the signature: each WorkerConfig field becomes a keyword-only option.
_signature = inspect.signature(worker_command, eval_str=True)
_fixed = [p for p in _signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
_options = [_option(name, field) for name, field in WorkerConfig.model_fields.items()]
worker_command.__dict__["__signature__"] = _signature.replace(parameters=[*_fixed, *_options])


def _run(
    modules: list[str], log_level: str | None, log_format: LogFormat | None, config: WorkerConfig
) -> None:
    if log_level is not None or log_format is not None:
        setup_logging(log_level or os.environ.get("CADENZA_LOG_LEVEL", "WARNING"), log_format)
    # A console script does not put the working directory on sys.path; users expect
    # `cadenza worker myapp.pipelines` to find their package from where they stand.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    settings = KafkaSettings.load()
    metrics_port, metrics_host = config.metrics_port, config.metrics_host
    discovery_topic, stop_timeout = config.discovery_topic, config.stop_timeout
    pipelines: list[Pipeline] = []
    for module in modules:
        pipelines.extend(load_pipelines(module))

    def make_worker() -> Worker:
        return Worker(pipelines, settings, config=config)

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
        url = advertised_url(config.metrics_advertised_host or server.host, server.port)
        if announcer is not None:
            announcer.url = url  # a restarted worker may have bound another port (--metrics-port 0)
        elif discovery_topic not in OFF:
            try:
                announcer = WorkerAnnouncer(
                    settings,
                    worker_id=worker.worker_id,
                    url=url,
                    group=worker.group,
                    pipelines=[pipeline.name for pipeline in pipelines],
                    topic=discovery_topic,
                ).start()
            except Exception as exc:  # discovery is a convenience: the worker runs without it
                _say(f"not announcing on {discovery_topic}: {exc}")
            else:
                _say(f"announcing {url} on {discovery_topic}")

    supervisor = WorkerSupervisor(make_worker, max_restarts=config.max_restarts, on_worker=on_worker)

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
