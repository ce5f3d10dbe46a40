"""``cadenza describe``: print the compiled pipelines of user modules."""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from cadenza.cli.console import command_errors
from cadenza.pipelines import Pipeline, describe, load_pipelines


@command_errors
def describe_command(
    modules: Annotated[
        list[str], typer.Argument(help="Modules declaring pipelines: dotted names or .py file paths.")
    ],
) -> None:
    """Show each pipeline's DAG, tenant, latency target and topics (compiling and validating it)."""
    # A console script does not put the working directory on sys.path; users expect
    # `cadenza describe myapp.pipelines` to find their package from where they stand.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    pipelines: list[Pipeline] = []
    for module in modules:
        pipelines.extend(load_pipelines(module))
    # Plain write, not rich: the rendering is aligned text and must not be re-wrapped to the terminal.
    sys.stdout.write(describe(pipelines))
