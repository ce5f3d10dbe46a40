"""S5's two tenants as cadenza pipelines, for the worker processes ``bench_migration.py`` starts.

Topics and targets come from ``S5_*`` environment variables set by the harness, so every strategy
runs on fresh topics (and fresh changelogs: internal topics are named after the pipeline):

- **BIG**: records ``{key, ts}`` keyed by the Kafka key (no repartition) -> one-day tumbling
  windows on the synthetic event time ``ts`` -> count. The harness keeps every record of a run in
  one window, so the state holds one entry per key (a million in full mode) for the whole run, and
  the results come out only when the harness closes the windows at the end.
- **LS** (latency-sensitive, as S1's LS): clicks -> key by user -> 1 s tumbling windows on the
  wall-clock ``ts`` -> count, target ``S5_LS_TARGET`` seconds after the window closes.
"""

from __future__ import annotations

import os

from pydantic import BaseModel

from cadenza.pipelines import Pipeline, Tumbling


class Entry(BaseModel):
    key: str
    ts: float


class Visit(BaseModel):
    user: str
    ts: float


def _env(name: str, default: str) -> str:
    return os.environ.get(f"S5_{name}", default)


RUN = _env("RUN", "local")

big = Pipeline(f"s5-big-{RUN}", tenant="BIG", latency_target=f"{_env('BIG_TARGET', '30')}s")
(
    big.source(_env("BIG_IN", "s5-big-in"), value=Entry, key=str, timestamp="ts")
    .window(Tumbling(_env("BIG_WINDOW", "24h")))
    .count()
    .sink(_env("BIG_OUT", "s5-big-out"))
)

ls = Pipeline(f"s5-ls-{RUN}", tenant="LS", latency_target=f"{_env('LS_TARGET', '0.3')}s")
(
    ls.source(_env("LS_IN", "s5-ls-in"), value=Visit, timestamp="ts", max_out_of_orderness="50ms")
    .key_by(lambda visit: visit.user)
    .window(Tumbling("1s"))
    .count()
    .sink(_env("LS_OUT", "s5-ls-out"))
)
