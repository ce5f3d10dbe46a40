"""The ``cadenza`` command line (typer + rich)."""

from cadenza.cli.app import app, main

__all__ = ["app", "main"]
