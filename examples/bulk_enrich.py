"""Tenant ``batch``, bulk: enrich every order with a CPU-heavy score; a loose 30 s target.

The bulk half of the multi-tenant scenario (benchmark S1): per-record work that is expensive but can
wait, which a deadline scheduler should run after the latency-sensitive tenant's urgent records.
"""

from __future__ import annotations

import hashlib

from pydantic import BaseModel

from cadenza.pipelines import Pipeline


class Order(BaseModel):
    order_id: str
    customer: str
    amount: float


class ScoredOrder(BaseModel):
    order_id: str
    customer: str
    amount: float
    risk_score: float


def score(order: Order, rounds: int = 2_000) -> ScoredOrder:
    """A deliberately CPU-bound score (iterated hashing), standing in for a model evaluation."""
    digest = order.order_id.encode()
    for _ in range(rounds):
        digest = hashlib.blake2b(digest, digest_size=16).digest()
    risk = int.from_bytes(digest[:4], "big") / 2**32
    return ScoredOrder(order_id=order.order_id, customer=order.customer, amount=order.amount, risk_score=risk)


bulk_enrich = Pipeline("bulk-enrich", tenant="batch", latency_target="30s", tenant_weight=1.0)
bulk_enrich.source("orders", value=Order).map(score).sink("orders-scored", format="avro")
