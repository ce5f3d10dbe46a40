"""The one reader of a worker's /metrics: parsing, series by labels, counter growth, buckets."""

from __future__ import annotations

import math

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from cadenza.infra.metrics.quantiles import bucket_bound, sample_quantile
from cadenza.infra.metrics.scrape import (
    ExpositionError,
    bucket_sums,
    counter_deltas,
    metrics_url,
    parse,
    sample_sums,
    sample_values,
)


def _exposition(records: dict[tuple[str, str], int], waits: dict[tuple[str, str], list[float]]) -> str:
    registry = CollectorRegistry()
    counter = Counter("records", "records", ("tenant", "operator"), registry=registry)
    histogram = Histogram(
        "wait_seconds", "wait", ("tenant", "operator"), buckets=(0.1, 1.0), registry=registry
    )
    for (tenant, operator), count in records.items():
        counter.labels(tenant, operator).inc(count)
    for (tenant, operator), values in waits.items():
        for value in values:
            histogram.labels(tenant, operator).observe(value)
    return generate_latest(registry).decode()


def test_series_by_labels_summed_over_the_others_and_their_growth() -> None:
    before = _exposition({("LS", "a"): 2, ("LS", "b"): 3}, {})
    after = _exposition({("LS", "a"): 5, ("LS", "b"): 3, ("BA", "a"): 4}, {})
    assert sample_values(after, "records_total", ("tenant", "operator"))[("LS", "a")] == 5.0
    assert sample_sums(parse(after), "records_total", ("tenant",)) == {("LS",): 8.0, ("BA",): 4.0}
    grown = counter_deltas(before, after, "records_total", ("tenant", "operator"))
    assert grown == {("LS", "a"): 3.0, ("BA", "a"): 4.0}  # ("LS", "b") did not grow
    assert sample_values(after, "records_total", ("missing",)) == {}


def test_buckets_sum_over_operators_and_their_quantiles() -> None:
    text = _exposition({}, {("LS", "a"): [0.05, 0.5], ("LS", "b"): [0.05, 2.0]})
    buckets = bucket_sums(text, "wait_seconds", ("tenant",))
    assert buckets == {("LS",): {0.1: 2.0, 1.0: 3.0, math.inf: 4.0}}
    assert bucket_bound(0.5, buckets[("LS",)]) == 0.1
    assert bucket_bound(0.75, buckets[("LS",)]) == 1.0
    assert bucket_bound(0.99, buckets[("LS",)]) is None  # in the +Inf bucket
    assert bucket_bound(0.5, {}) is None


def test_nearest_rank_quantile_of_values() -> None:
    assert sample_quantile([], 0.5) is None
    assert sample_quantile([3.0, 1.0, 2.0], 0.5) == 2.0
    assert sample_quantile([float(i) for i in range(1, 101)], 0.99) == 99.0
    assert sample_quantile([1.0, 2.0], 0.0) == 1.0


def test_garbage_is_an_exposition_error_and_urls_mean_metrics() -> None:
    with pytest.raises(ExpositionError):
        parse("this is { not prometheus")
    assert metrics_url("host:9000") == "http://host:9000/metrics"
    assert metrics_url("http://host:9000/other") == "http://host:9000/other"
