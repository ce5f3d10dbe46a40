"""The metric declarations: unique, well-formed, documented."""

from __future__ import annotations

import re
from pathlib import Path

from cadenza.infra.metrics import names
from cadenza.infra.metrics.names import ALL_METRICS, MetricDef, MetricKind

_NAME = re.compile(r"^cadenza_[a-z0-9_]+$")


def test_every_declared_metric_is_listed_once() -> None:
    declared = [value for value in vars(names).values() if isinstance(value, MetricDef)]
    assert sorted(m.name for m in declared) == sorted(m.name for m in ALL_METRICS)
    assert len({m.name for m in ALL_METRICS}) == len(ALL_METRICS)


def test_names_follow_prometheus_conventions() -> None:
    for metric in ALL_METRICS:
        assert _NAME.match(metric.name), metric.name
        assert not metric.name.endswith("_total"), "the exposition adds _total to counters"
        assert metric.help and "\n" not in metric.help
        if metric.kind is MetricKind.HISTOGRAM:
            assert metric.name.endswith("_seconds")
            assert list(metric.buckets) == sorted(set(metric.buckets)) and metric.buckets
        else:
            assert metric.buckets == ()
        assert "le" not in metric.labels


def test_sample_names() -> None:
    assert names.RECORDS_PROCESSED.sample_name == "cadenza_records_processed_total"
    assert names.RUN_TIME.sample_name == "cadenza_run_time_seconds"
    assert names.BUFFERED_RECORDS.sample_name == "cadenza_buffered_records"


def test_the_docs_list_every_metric() -> None:
    doc = (Path(__file__).parents[3] / "cadenza" / "schemas" / "METRICS.md").read_text(encoding="utf-8")
    missing = [m.sample_name for m in ALL_METRICS if f"`{m.sample_name}`" not in doc]
    assert not missing, f"cadenza/schemas/METRICS.md does not list {missing}"
