"""``cadenza worker``: run the pipelines of user modules until SIGINT or SIGTERM.

The options are built from the fields of :class:`~cadenza.worker.config.WorkerConfig` and
:class:`~cadenza.worker.config.ProcessConfig` (name, ``CADENZA_*`` variable, default, bounds, unit and
help), so a setting is declared once for the CLI, ``Worker(pipelines, settings, config, process=...)``
and the docs' settings reference; a container is configured entirely from its environment. Connection
settings are :class:`~cadenza.settings.KafkaSettings`.
"""

from __future__ import annotations

import inspect
import json
import logging
import os
import sys
import typing
from typing import Annotated, Any

import typer
from pydantic.fields import FieldInfo
from rich.markup import escape

from cadenza.cli.console import LogFormat, err_console, setup_logging, user_errors
from cadenza.pipelines import Pipeline, load_pipelines
from cadenza.settings import KafkaSettings
from cadenza.worker import Worker
from cadenza.worker.config import ENV_PREFIX, ProcessConfig, WorkerConfig, bounds, unit
from cadenza.worker.kafka.group_plan import PlanMismatchError

_log = logging.getLogger("cadenza.cli")


def _option(name: str, field: FieldInfo) -> inspect.Parameter:
    """A ``--name`` option of ``cadenza worker`` from a WorkerConfig or ProcessConfig field: its
    variable, default, inclusive bounds (exclusive ones are checked by the config) and help with the unit."""
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
    if field.annotation is not None and typing.get_origin(field.annotation) is dict:
        # A mapping is given as JSON text (the config parses it); None leaves the default.
        return inspect.Parameter(
            name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Annotated[str | None, option]
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
    check: Annotated[
        bool,
        typer.Option(
            "--check",
            help="Check the pipelines and settings, print every setting as the worker would use it (JSON) "
            "and exit, without contacting Kafka.",
        ),
    ] = False,
    **settings: Any,
) -> None:
    """Run every pipeline of MODULES in one consumer group, until Ctrl-C or SIGTERM.

    On a signal the worker stops fetching, commits what finished (outputs flushed first), hands the
    records still queued back to the group uncommitted, leaves the group and exits 0.
    """
    with user_errors():
        given = {k: v for k, v in settings.items() if v is not None or k != "consumer_overrides"}
        worker_fields = {k: v for k, v in given.items() if k in WorkerConfig.model_fields}
        process_fields = {k: v for k, v in given.items() if k in ProcessConfig.model_fields}
        config, process = WorkerConfig.load(**worker_fields), ProcessConfig.load(**process_fields)
        if check:
            _check(modules, config, process)
            return
        _run(
            modules,
            log_level,
            log_format,
            config,
            process,
        )


# typer reads the options from the signature: each field of both models becomes a keyword-only option.
_signature = inspect.signature(worker_command, eval_str=True)
_fixed = [p for p in _signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
_options = [
    _option(name, field)
    for model in (WorkerConfig, ProcessConfig)
    for name, field in model.model_fields.items()
]
worker_command.__dict__["__signature__"] = _signature.replace(parameters=[*_fixed, *_options])


def _run(
    modules: list[str],
    log_level: str | None,
    log_format: LogFormat | None,
    config: WorkerConfig,
    process: ProcessConfig,
) -> None:
    if log_level is not None or log_format is not None:
        setup_logging(log_level or os.environ.get("CADENZA_LOG_LEVEL", "WARNING"), log_format)
    settings = KafkaSettings.load()
    pipelines = _pipelines(modules)
    worker = Worker(pipelines, settings, config, process=process)
    # Plain writes, not rich: topic names are long and must not be re-wrapped to the terminal.
    _say(f"cadenza worker at {settings.bootstrap_servers}")
    _say(worker.describe())
    _say("running; Ctrl-C or SIGTERM stops")
    try:
        worker.serve(say=_say)
    except PlanMismatchError as exc:
        # Not a crash but a deployment mistake (also at an in-place restart after the group's plan was
        # replaced), told apart from other failures by its exit code.
        err_console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
        raise typer.Exit(2) from None
    counts = ", ".join(f"{name}={value}" for name, value in worker.counters.snapshot().items())
    _say(f"stopped: {counts}")


def _pipelines(modules: list[str]) -> list[Pipeline]:
    # A console script does not put the working directory on sys.path; users expect
    # `cadenza worker myapp.pipelines` to find their package from where they stand.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    pipelines: list[Pipeline] = []
    for module in modules:
        pipelines.extend(load_pipelines(module))
    return pipelines


def _check(modules: list[str], config: WorkerConfig, process: ProcessConfig) -> None:
    worker = Worker(_pipelines(modules), KafkaSettings.load(), config, process=process)
    _say(json.dumps(worker.settings_in_effect(), indent=2, sort_keys=True))


def _say(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()
