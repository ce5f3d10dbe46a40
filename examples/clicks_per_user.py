"""Tenant ``ads``, latency-sensitive: clicks per user per second, out within 250 ms of window close.

The latency-sensitive half of the multi-tenant scenario (benchmark S1): a cheap filter, a re-key and
a 1 s tumbling count whose results matter only if they are fresh.
"""

from __future__ import annotations

from pydantic import BaseModel

from cadenza.pipelines import Pipeline, Tumbling


class Click(BaseModel):
    user: str
    page: str
    ts: float  # event time, seconds since the epoch


def is_real_page(click: Click) -> bool:
    return click.page != "/health"


def user_of(click: Click) -> str:
    return click.user


clicks_per_user = Pipeline("clicks-per-user", tenant="ads", latency_target="250ms", tenant_weight=2.0)
(
    clicks_per_user.source("clicks", value=Click, timestamp="ts", max_out_of_orderness="100ms")
    .filter(is_real_page)
    .key_by(user_of)
    .window(Tumbling("1s"), allowed_lateness="200ms")
    .count()
    .sink("clicks-per-user")
)
