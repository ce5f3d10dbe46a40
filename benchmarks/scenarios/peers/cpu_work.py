"""S1's per-record CPU work for the peer apps: :mod:`cadenza.demo.cpu_work`, loaded by file path.

The peers' venvs have no cadenza installed, and the work must be identical in every system, so the
one definition (pure standard library) is loaded from the checkout's ``cadenza/demo/cpu_work.py``
without importing the ``cadenza`` package.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

__all__ = ["burn", "burn_cpu"]

_SOURCE = Path(__file__).resolve().parents[3] / "cadenza" / "demo" / "cpu_work.py"


def _load() -> tuple[Callable[[str, int], int], Callable[[str, float], int]]:
    spec = importlib.util.spec_from_file_location("_cadenza_demo_cpu_work", _SOURCE)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load the S1 CPU work from {_SOURCE}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.burn, module.burn_cpu


burn, burn_cpu = _load()
