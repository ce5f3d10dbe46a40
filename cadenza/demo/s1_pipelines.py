"""S1's two tenants as cadenza pipelines, for ``cadenza worker cadenza.demo.s1_pipelines``.

Topics, targets and the BA cost come from ``S1_*`` environment variables set by the harness
(:mod:`cadenza.demo.s1`), so every run gets fresh topics and the calibrated cost:

- **LS** (latency-sensitive): clicks -> drop ``/health`` -> key by user -> 1 s tumbling windows on the
  event time ``ts`` -> count -> one result per user and window (JSON ``{key, window_start,
  window_end, value}``). Target ``S1_LS_TARGET`` seconds after the window closes.
- **BA** (bulk): jobs -> :func:`cadenza.demo.cpu_work.burn` (``S1_CPU_ITERATIONS`` rounds, calibrated)
  or :func:`~cadenza.demo.cpu_work.burn_cpu` (``S1_CPU_SECONDS`` of CPU, when set) -> ``{id, ts,
  score}``. Target ``S1_BA_TARGET`` seconds.
"""

from __future__ import annotations

import os

from pydantic import BaseModel

from cadenza.demo.cpu_work import burn, burn_cpu
from cadenza.pipelines import Pipeline, Tumbling


class Visit(BaseModel):
    user: str
    page: str
    ts: float


class Job(BaseModel):
    id: int
    payload: str
    ts: float


class Scored(BaseModel):
    id: int
    ts: float
    score: int


ITERATIONS = int(os.environ.get("S1_CPU_ITERATIONS", "100"))
CPU_SECONDS = float(os.environ.get("S1_CPU_SECONDS", "0"))


def score(job: Job) -> Scored:
    work = burn_cpu(job.payload, CPU_SECONDS) if CPU_SECONDS > 0 else burn(job.payload, ITERATIONS)
    return Scored(id=job.id, ts=job.ts, score=work)


def _env(name: str, default: str) -> str:
    return os.environ.get(f"S1_{name}", default)


# Internal topics (repartition, changelog) are named after the pipeline: a fresh name per run.
RUN = _env("RUN", "local")

ls = Pipeline(f"s1-ls-{RUN}", tenant="LS", latency_target=f"{_env('LS_TARGET', '0.3')}s")
(
    ls.source(_env("LS_IN", "s1-ls-in"), value=Visit, timestamp="ts", max_out_of_orderness="50ms")
    .filter(lambda visit: visit.page != "/health")
    .key_by(lambda visit: visit.user)
    .window(Tumbling("1s"))
    .count()
    .sink(_env("LS_OUT", "s1-ls-out"))
)

ba = Pipeline(f"s1-ba-{RUN}", tenant="BA", latency_target=f"{_env('BA_TARGET', '5')}s")
ba.source(_env("BA_IN", "s1-ba-in"), value=Job).map(score).sink(_env("BA_OUT", "s1-ba-out"))
