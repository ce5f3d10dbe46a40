"""The examples, run unchanged by the broker-free PipelineDriver and checked against brute force.

Their broker tests (two worker processes on clicks_per_user, the loadgen) are in ``tests/docker``.
"""

from __future__ import annotations

import importlib.util
import math
import random
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

from cadenza.scheduling.clock import VirtualClock
from cadenza.testing import PipelineDriver

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def example(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # pydantic resolves the models' annotations through it
    spec.loader.exec_module(module)
    return module


def test_clicks_per_user_counts_real_pages_per_user_per_second() -> None:
    clicks = example("clicks_per_user")
    rng = random.Random(7)
    t = 1_700_000_000.0
    sent: list[tuple[str, str, float]] = []
    for _ in range(300):
        t += rng.uniform(0.0, 0.05)
        sent.append((rng.choice("uvwxyz"), rng.choice(["/", "/a", "/health"]), t))
    # Four partitions as `cadenza worker` makes by default; the final click on every partition moves
    # each watermark input past every window before it.
    with PipelineDriver([clicks.clicks_per_user], clock=VirtualClock(t), partitions=4) as driver:
        for user, page, ts in sent:
            driver.pipe("clicks", clicks.Click(user=user, page=page, ts=ts), key=user)
        for partition in range(4):
            driver.pipe("clicks", clicks.Click(user="end", page="/", ts=t + 5.0), partition=partition)
        out = driver.outputs("clicks-per-user")
        assert driver.late("clicks-per-user") == []
        assert driver.dead_letters("clicks-per-user") == []
    got = Counter({(r.key, r.value["window_start"]): r.value["value"] for r in out})
    expected = Counter((user, float(math.floor(ts))) for user, page, ts in sent if page != "/health")
    assert got == expected
    assert all(r.context is not None and r.context.tenant_id == "ads" for r in out)


def test_clicks_per_user_sends_a_click_behind_the_watermark_to_late() -> None:
    clicks = example("clicks_per_user")
    with PipelineDriver([clicks.clicks_per_user]) as driver:
        for ts in (10.5, 12.0, 10.6):  # 10.6 arrives after 11 + 0.2 s lateness <= 12.0 - 0.1
            driver.pipe("clicks", clicks.Click(user="u", page="/", ts=ts))
        late = driver.late("clicks-per-user")
        assert [(r.value["ts"], r.headers["cadenza-window-end"]) for r in late] == [(10.6, b"11.0")]
        assert [r.value for r in driver.outputs("clicks-per-user")] == [
            {"key": "u", "window_start": 10.0, "window_end": 11.0, "value": 1}
        ]


def test_bulk_enrich_scores_every_order_and_dead_letters_a_bad_one() -> None:
    bulk = example("bulk_enrich")
    orders: list[Any] = [bulk.Order(order_id=str(i), customer=f"c{i % 3}", amount=i * 1.5) for i in range(20)]
    with PipelineDriver([bulk.bulk_enrich]) as driver:
        for order in orders[:10]:
            driver.pipe("orders", order)
        driver.pipe("orders", {"order_id": "bad"})  # no customer, no amount
        for order in orders[10:]:
            driver.pipe("orders", order)
        scored = [r.value for r in driver.outputs("orders-scored", bulk.ScoredOrder)]
        dead = driver.dead_letters("bulk-enrich")
    assert scored == [bulk.score(order) for order in orders]
    assert [d.headers["cadenza-error-type"] for d in dead] == [b"ValidationError"]
    assert dead[0].value == {"order_id": "bad"}
