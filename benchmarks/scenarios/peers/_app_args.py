"""The command line every throughput app takes, so the harness starts each system the same way.

Standard library only: imported from cadenza's venv and from every peer venv.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

__all__ = ["parse_app_args", "put_benchmarks_on_path"]


def put_benchmarks_on_path() -> None:
    """Let an app run by path import ``peers.*`` (the benchmarks directory is not an installed package)."""
    benchmarks = str(Path(__file__).resolve().parent.parent)
    if benchmarks not in sys.path:
        sys.path.insert(0, benchmarks)


def parse_app_args(description: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--bootstrap", required=True, help="host:port of the broker")
    parser.add_argument("--input", required=True, help="topic to read (from the beginning)")
    parser.add_argument("--output", required=True, help="topic to write (must exist)")
    parser.add_argument("--group", required=True, help="consumer group (fresh per run)")
    parser.add_argument("--workdir", default=".", help="where the app may keep local files")
    parser.add_argument("--policy", default="cameo", help="cadenza only: the scheduling policy")
    return parser.parse_args()
