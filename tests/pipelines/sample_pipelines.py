"""Two pipelines of two tenants, the shape of benchmark S1, for the registry and describe tests.

``clicks_per_user`` is latency-sensitive (tenant ``ads``, 250 ms); ``enrich`` is bulk work (tenant
``batch``, 30 s). Kept importable both as ``tests.pipelines.sample_pipelines`` and as a file path.
"""

from __future__ import annotations

from pydantic import BaseModel

from cadenza.pipelines import Pipeline, Tumbling


class Click(BaseModel):
    user: str
    page: str
    ts: float


class Order(BaseModel):
    order_id: str
    amount: float


class EnrichedOrder(BaseModel):
    order_id: str
    amount: float
    amount_cents: int


def not_health_check(click: Click) -> bool:
    return click.page != "/health"


def user_of(click: Click) -> str:
    return click.user


def enrich_order(order: Order) -> EnrichedOrder:
    return EnrichedOrder(order_id=order.order_id, amount=order.amount, amount_cents=round(order.amount * 100))


clicks_per_user = Pipeline("clicks-per-user", tenant="ads", latency_target="250ms", tenant_weight=2.0)
(
    clicks_per_user.source("clicks", value=Click, timestamp="ts")
    .filter(not_health_check)
    .key_by(user_of)
    .window(Tumbling("1s"), allowed_lateness="200ms")
    .count()
    .sink("clicks-per-user")
)

enrich = Pipeline("enrich", tenant="batch", latency_target="30s", tenant_weight=0.5)
enrich.source("orders", value=Order).map(enrich_order).sink("orders-enriched", format="avro")

# A second name for the same object must not make it count twice.
ALIAS = enrich
