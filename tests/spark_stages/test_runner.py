"""A heavy aggregation stage on local Spark against the real broker: results, contexts, dead letters."""

from __future__ import annotations

import json
import random
from collections import defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from cadenza.scheduling.context import CONTEXT_HEADER, SchedulingContext, decode_context, encode_context
from cadenza.settings import KafkaSettings
from cadenza.spark_stages.runner import start_stage
from cadenza.testing.pytest_plugin import NewTopic
from tests.infra.spark.kafka_helpers import consume_all, produce
from tests.spark_stages.stage_pipelines import sales

pytestmark = pytest.mark.kafka

BASE = 1_700_000_000.0
TIMEOUT = 120


def test_stage_output_equals_an_independent_computation_and_carries_contexts(
    spark: SparkSession, kafka_settings: KafkaSettings, new_topic: NewTopic, tmp_path: Path
) -> None:
    """Per region and 10 s window: sums and counts as plain Python computes them; each result's
    context has the pipeline's tenant and target and the window's end as frontier; a record that is
    not a Sale goes to the dead-letter topic instead of failing the query."""
    graph = sales.compile()
    (stage,) = graph.spark_stages
    input_topic, output_topic, dead_topic = new_topic(partitions=2), new_topic(), new_topic()
    graph = graph.model_copy(
        update={
            "spark_stages": [
                stage.model_copy(update={"input_topic": input_topic, "output_topic": output_topic})
            ],
            "dead_letter_topic": dead_topic,
        }
    )
    rng = random.Random(3)
    rows: list[dict[str, Any]] = [
        {
            "region": rng.choice(["eu", "us", "apac"]),
            "amount": round(rng.uniform(0, 100), 2),
            "ts": BASE + rng.uniform(0, 35),
        }
        for _ in range(300)
    ]
    upstream = SchedulingContext("sales", "finance", BASE, 3.0, 0.0, 0.0, 2, 7)
    records = [
        (
            i % 2,
            row["region"].encode(),
            json.dumps(row).encode(),
            [(CONTEXT_HEADER, encode_context(upstream))] if i % 3 else [],
        )
        for i, row in enumerate(rows)
    ]
    records.append((0, None, b"{not json", []))
    produce(kafka_settings, input_topic, records, batched=True)

    job = start_stage(
        spark, graph, stage.id, kafka_settings, checkpoint=tmp_path / "cp", trigger="availableNow"
    )
    assert job.await_termination(TIMEOUT), "stage did not finish"

    expected: dict[tuple[float, str], tuple[float, int]] = defaultdict(lambda: (0.0, 0))
    for row in rows:
        start = float((row["ts"] // 10) * 10)
        total, count = expected[(start, row["region"])]
        expected[(start, row["region"])] = (total + row["amount"], count + 1)
    got: dict[tuple[float, str], tuple[float, int]] = {}
    for record in consume_all(kafka_settings, output_topic, partitions=1):
        assert record.value is not None
        value = json.loads(record.value)
        start = datetime.fromisoformat(value["window"]["start"]).timestamp()
        end = datetime.fromisoformat(value["window"]["end"]).timestamp()
        got[(start, value["region"])] = (value["total"], value["sales"])
        ctx = decode_context(dict(record.headers)[CONTEXT_HEADER])
        assert ctx is not None
        assert (ctx.pipeline_id, ctx.tenant_id, ctx.latency_target) == ("sales", "finance", 3.0)
        assert ctx.frontier_time == pytest.approx(end)
        assert ctx.hops == stage.hops + 1
    assert sorted(got) == sorted(expected)
    for key, (total, count) in expected.items():
        assert got[key][1] == count
        assert got[key][0] == pytest.approx(total)
    assert job.written == len(expected)

    dead = consume_all(kafka_settings, dead_topic, partitions=1)
    assert [r.value for r in dead] == [b"{not json"]
    assert job.dead_letters == 1
    error = dict(dead[0].headers)["cadenza-error"]
    assert error is not None and b"not JSON of Sale" in error
