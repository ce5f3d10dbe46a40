"""How a step may run in parallel (Dirigo's dual-mode operators): ``parallel``, ``executor``, ``timeout``.

A map, filter or flat_map step runs on the worker's one Python thread (the *lessor*) unless it is
declared with lessees: ``parallel=N`` keeps ``N`` lessees leased while the worker runs,
``parallel="auto"`` leases them by the scheduler's slack, up to the worker's core budget. A lessee
is a process (``executor="process"``, for CPU-bound Python, which the GIL would otherwise serialise)
or a thread (``executor="thread"``, for blocking I/O). ``timeout`` bounds one call; a call past it is
dead-lettered with ``cadenza-error-type: StepTimeout``, which needs the call off the lessor, so a
step with a timeout always runs on a lessee.

The spec is written into the step's parameters (so ``cadenza describe`` shows it and a worker
rebuilds it from the compiled graph alone), and everything that cannot work is refused here, at the
user's line: a function a process lessee could not receive, an unknown executor, a bad count.
"""

from __future__ import annotations

import math
import pickle
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal, get_args

from pydantic import JsonValue

from cadenza.durations import parse_duration

__all__ = ["ExecutorKind", "Parallel", "ParallelSpec", "parallel_spec"]

ExecutorKind = Literal["process", "thread"]
Parallel = int | Literal["auto"]


@dataclass(frozen=True, slots=True)
class ParallelSpec:
    """``lessees``: that many lessees always on, or ``None`` for ``"auto"``; ``executor``: what a lessee
    is; ``timeout_s``: the bound on one call, or ``None``."""

    lessees: int | None = 1
    executor: ExecutorKind = "process"
    timeout_s: float | None = None

    @property
    def auto(self) -> bool:
        return self.lessees is None

    @property
    def inline(self) -> bool:
        """Whether the step runs on the lessor, as a plain step (``parallel=1`` without a timeout)."""
        return self.lessees == 1 and self.timeout_s is None

    def parameters(self) -> dict[str, JsonValue]:
        """What goes into the step's parameters; nothing for an inline step (so graphs stay as they were)."""
        if self.inline:
            return {}
        return {
            "parallel": "auto" if self.lessees is None else self.lessees,
            "executor": self.executor,
            "timeout_s": self.timeout_s,
        }

    @classmethod
    def of(cls, parameters: Mapping[str, Any]) -> ParallelSpec:
        """The spec a compiled step's parameters hold (an inline spec when they hold none)."""
        parallel = parameters.get("parallel", 1)
        timeout = parameters.get("timeout_s")
        return cls(
            lessees=None if parallel == "auto" else int(parallel),
            executor="thread" if parameters.get("executor") == "thread" else "process",
            timeout_s=None if timeout is None else float(timeout),
        )

    def describe(self) -> str:
        if self.inline:
            return "on the lessor"
        count = "auto" if self.lessees is None else str(self.lessees)
        timeout = "" if self.timeout_s is None else f", timeout {self.timeout_s:g}s"
        return f"parallel={count} ({self.executor}{timeout})"


def parallel_spec(
    kind: str,
    fn: Callable[..., Any],
    parallel: object,
    executor: object,
    timeout: str | float | timedelta | None,
) -> ParallelSpec:
    """The spec of a ``kind`` step running ``fn``, or a ``ValueError`` saying what cannot work (the
    caller names the pipeline and step)."""
    if parallel == "auto":
        lessees: int | None = None
    elif isinstance(parallel, int) and not isinstance(parallel, bool) and parallel >= 1:
        lessees = parallel
    else:
        raise ValueError(f"{kind}() parallel must be a positive integer or 'auto', got {parallel!r}")
    if executor not in get_args(ExecutorKind):
        raise ValueError(
            f"{kind}() executor must be 'process' (CPU-bound Python) or 'thread' (blocking I/O), "
            f"got {executor!r}"
        )
    timeout_s: float | None = None
    if timeout is not None:
        try:
            timeout_s = parse_duration(timeout, what=f"{kind}() timeout")
        except ValueError as exc:
            raise ValueError(str(exc)) from None
        if not (0.0 < timeout_s < math.inf):
            raise ValueError(f"{kind}() timeout must be a positive, finite duration, got {timeout!r}")
    spec = ParallelSpec(lessees, "thread" if executor == "thread" else "process", timeout_s)
    if spec.executor == "process" and not spec.inline:
        try:
            pickle.dumps(fn)
        except Exception as exc:  # any failure to pickle means the same thing here
            raise ValueError(
                f"{kind}() with executor='process' sends its function to other processes, but "
                f"{getattr(fn, '__qualname__', fn)!r} cannot be pickled ({exc}); define it at the top "
                "level of a module (not a lambda or a nested function), or use executor='thread'"
            ) from None
    return spec
