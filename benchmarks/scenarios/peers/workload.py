"""The throughput workload, shared by every system: the seeded input records and the per-record map.

Imports nothing but the standard library, so the same code runs in cadenza's venv and in each peer's;
every system therefore parses the same bytes and does the same work per record (``json.loads`` ->
:func:`transform` -> ``json.dumps``), and the comparison measures the frameworks, not the workloads.
"""

from __future__ import annotations

import json
import random
from typing import Any

__all__ = ["make_records", "transform"]

_KINDS = ("view", "buy", "refund", "cart")


def make_records(count: int, seed: int) -> list[tuple[bytes, bytes]]:
    """``count`` (key, value) pairs of about 100-byte JSON, the same for the same ``seed``."""
    rng = random.Random(seed)
    records = []
    for i in range(count):
        user = f"user-{rng.randrange(1000):04d}"
        value = {
            "id": i,
            "user": user,
            "kind": _KINDS[rng.randrange(len(_KINDS))],
            "amount": round(rng.uniform(0, 500), 2),
            "note": "x" * rng.randrange(8, 32),
        }
        records.append((user.encode(), json.dumps(value, separators=(",", ":")).encode()))
    return records


def transform(value: dict[str, Any]) -> dict[str, Any]:
    """The map every system applies: a derived field and a copy of the record."""
    return {**value, "amount_cents": round(value["amount"] * 100), "big": value["amount"] > 250}
