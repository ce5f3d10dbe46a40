"""S6's three tenants as cadenza pipelines, for ``cadenza worker s6_pipelines`` (``bench_dirigo.py``).

The worker loads this module by its name, with ``benchmarks/scenarios`` on ``PYTHONPATH``, not by
its path: a process lessee receives ``score`` pickled as ``s6_pipelines.score`` and imports it
under that name, which a module loaded from a path (``_cadenza_user_...``) would not have.

- **LS**: S1's click count (:mod:`cadenza.demo.s1_pipelines`' ``ls``, its topics and target from
  the same ``S1_*`` variables), so its figures compare with S1's.
- **BA** (BA-heavy): jobs -> ``score``, ``S1_CPU_SECONDS`` of CPU each (about 2 ms) -> ``{id, ts,
  score, cpu_ms}``.
- **IO**: requests -> ``wait_io``, which blocks ``S6_IO_SLEEP`` seconds (``time.sleep``, as a call to
  a slow service would) -> the same shape.

How the two maps run comes from ``S6_BA_*`` and ``S6_IO_*`` (``PARALLEL``: 1, N or auto;
``EXECUTOR``), so one module serves every system of the benchmark.
Each output carries ``cpu_ms``, the CPU time of the call in the thread that ran it, wherever that
was: the benchmark's CPU seconds per tenant for the two maps.
"""

from __future__ import annotations

import os
import time

from pydantic import BaseModel

from cadenza.demo.cpu_work import burn_cpu
from cadenza.demo.s1_pipelines import RUN, Job, ls
from cadenza.pipelines import Pipeline
from cadenza.pipelines.parallel import ExecutorKind, Parallel

__all__ = ["Costed", "ba", "io", "ls", "score", "wait_io"]


class Costed(BaseModel):
    id: int
    ts: float
    score: int
    cpu_ms: float


CPU_SECONDS = float(os.environ.get("S1_CPU_SECONDS", "0.002"))
IO_SLEEP = float(os.environ.get("S6_IO_SLEEP", "0.05"))


def score(job: Job) -> Costed:
    started = time.thread_time()
    work = burn_cpu(job.payload, CPU_SECONDS)
    return Costed(id=job.id, ts=job.ts, score=work, cpu_ms=(time.thread_time() - started) * 1000.0)


def wait_io(job: Job) -> Costed:
    started = time.thread_time()
    time.sleep(IO_SLEEP)
    return Costed(
        id=job.id, ts=job.ts, score=len(job.payload), cpu_ms=(time.thread_time() - started) * 1000.0
    )


def _parallel(name: str) -> Parallel:
    value = os.environ.get(name, "1").strip()
    return "auto" if value == "auto" else int(value)


def _executor(name: str, default: ExecutorKind) -> ExecutorKind:
    return "thread" if os.environ.get(name, default) == "thread" else "process"


def _env(name: str, default: str) -> str:
    return os.environ.get(f"S6_{name}", default)


ba = Pipeline(f"s6-ba-{RUN}", tenant="BA", latency_target=f"{os.environ.get('S1_BA_TARGET', '5')}s")
ba.source(os.environ.get("S1_BA_IN", "s6-ba-in"), value=Job).map(
    score,
    parallel=_parallel("S6_BA_PARALLEL"),
    executor=_executor("S6_BA_EXECUTOR", "process"),
).sink(os.environ.get("S1_BA_OUT", "s6-ba-out"))

io = Pipeline(f"s6-io-{RUN}", tenant="IO", latency_target=f"{_env('IO_TARGET', '1')}s")
io.source(_env("IO_IN", "s6-io-in"), value=Job).map(
    wait_io,
    parallel=_parallel("S6_IO_PARALLEL"),
    executor=_executor("S6_IO_EXECUTOR", "thread"),
).sink(_env("IO_OUT", "s6-io-out"))
