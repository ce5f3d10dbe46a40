"""Shared console, logging set-up and error reporting for CLI commands."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import ParamSpec, TypeVar

import typer
from rich.console import Console
from rich.logging import RichHandler

from cadenza.errors import CadenzaError

P = ParamSpec("P")
R = TypeVar("R")

console = Console(stderr=False)
err_console = Console(stderr=True)


def setup_logging(level: str = "INFO") -> None:
    logging.basicConfig(
        level=level.upper(),
        format="%(message)s",
        handlers=[RichHandler(console=err_console, show_path=False, rich_tracebacks=False)],
        force=True,
    )


@contextmanager
def user_errors() -> Iterator[None]:
    """Turn cadenza's deliberate errors into one red message and exit code 1, without a traceback."""
    try:
        yield
    except CadenzaError as exc:
        err_console.print(f"[bold red]error:[/] {exc}", highlight=False)
        raise typer.Exit(1) from None


def command_errors(func: Callable[P, R]) -> Callable[P, R]:
    """Decorator form of :func:`user_errors` for typer commands."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with user_errors():
            return func(*args, **kwargs)

    return wrapper
