"""Shared console, logging set-up and error reporting for CLI commands."""

from __future__ import annotations

import functools
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from enum import StrEnum
from typing import Any, ParamSpec, TypeVar

import typer
from rich.console import Console
from rich.logging import RichHandler
from rich.markup import escape

from cadenza.errors import CadenzaError, ConfigError

P = ParamSpec("P")
R = TypeVar("R")

console = Console(stderr=False)
err_console = Console(stderr=True)


class LogFormat(StrEnum):
    """``rich``: coloured lines for a person at a terminal; ``json``: one object per line for machines."""

    RICH = "rich"
    JSON = "json"


_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")

#: Read when no format is passed, so ``CADENZA_LOG_FORMAT=json`` reaches every command's logging.
LOG_FORMAT_ENV = "CADENZA_LOG_FORMAT"

# Attributes every LogRecord has; anything else on a record came from ``extra=`` and is logged too.
_RECORD_FIELDS = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``ts`` (UTC, ISO 8601), ``level``, ``logger``, ``message``, extras.

    Container platforms and log shippers split on lines and parse each as JSON, so a record must
    never span lines: tracebacks go into an ``exc`` string field, and values JSON cannot represent
    are written as their ``str``.
    """

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _RECORD_FIELDS and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


def setup_logging(level: str = "INFO", log_format: LogFormat | str | None = None) -> None:
    """Configure the root logger for a CLI command, on stderr (stdout stays for command output).

    ``log_format`` None means ``$CADENZA_LOG_FORMAT``, else ``rich`` (the default for people). An
    unknown value from the environment falls back to ``rich`` with a warning instead of stopping a
    command over how it logs; an unknown value passed in code is a bug and raises ValueError. An
    unknown level raises :class:`~cadenza.errors.ConfigError` (one line, naming the setting).
    """
    if level.upper() not in _LEVELS:
        raise ConfigError(
            f"log level {level!r} (--log-level or CADENZA_LOG_LEVEL) is not a level; choose one of "
            + ", ".join(_LEVELS)
        )
    unknown_env: str | None = None
    if log_format is None:
        raw = os.environ.get(LOG_FORMAT_ENV, "").strip().lower() or LogFormat.RICH.value
        try:
            log_format = LogFormat(raw)
        except ValueError:
            unknown_env, log_format = raw, LogFormat.RICH
    chosen = LogFormat(log_format)
    handler: logging.Handler
    if chosen is LogFormat.JSON:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(JsonFormatter())
    else:
        handler = RichHandler(console=err_console, show_path=False, rich_tracebacks=False)
    logging.basicConfig(level=level.upper(), format="%(message)s", handlers=[handler], force=True)
    if unknown_env is not None:
        logging.getLogger("cadenza.cli").warning(
            "%s=%s is not a log format (choose %s); logging as rich",
            LOG_FORMAT_ENV,
            unknown_env,
            " or ".join(f.value for f in LogFormat),
        )


@contextmanager
def user_errors() -> Iterator[None]:
    """Turn cadenza's deliberate errors into one red message and exit code 1, without a traceback."""
    try:
        yield
    except CadenzaError as exc:
        # The message is text, not console markup: "[/path]" in it must print as written.
        err_console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
        raise typer.Exit(1) from None


def command_errors(func: Callable[P, R]) -> Callable[P, R]:
    """Decorator form of :func:`user_errors` for typer commands."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with user_errors():
            return func(*args, **kwargs)

    return wrapper
