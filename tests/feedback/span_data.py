"""Seeded span streams and the statistics computed from them directly, the independent side of checks."""

from __future__ import annotations

import math
import random
from collections import defaultdict
from dataclasses import dataclass

from cadenza.infra.kafka.clients import flush_or_raise, make_producer
from cadenza.infra.metrics.spans import SPAN_CODEC, Span, encode_span, span_key
from cadenza.settings import KafkaSettings

#: A whole number of windows after the epoch, so windows line up with round numbers in messages.
BASE = 1_700_000_000.0


def generate_spans(seed: int, count: int, span_s: float) -> list[Span]:
    """Spans of two pipelines (one tenant each) with a middle and a sink operator, sampled by two
    workers at different ratios, emitted over ``span_s`` seconds from :data:`BASE`."""
    rng = random.Random(seed)
    operators = [
        ("orders", "shop", "2-map", False),
        ("orders", "shop", "3-sink", True),
        ("clicks", "ads", "2-filter", False),
        ("clicks", "ads", "4-sink", True),
    ]
    workers = [("w1", 1.0), ("w2", 0.25)]
    spans: list[Span] = []
    for index in range(count):
        pipeline, tenant, operator, sink = operators[index % len(operators)]
        worker, ratio = workers[rng.randrange(len(workers))]
        run = rng.lognormvariate(math.log(0.002), 0.8)
        wait = rng.expovariate(1 / 0.01)
        at = round((BASE + rng.uniform(0, span_s)) * 1e6) / 1e6  # as the wire carries it
        e2e = rng.uniform(0.05, 0.4) if sink else None
        spans.append(
            Span(
                pipeline_id=pipeline,
                tenant_id=tenant,
                operator_id=operator,
                worker_id=worker,
                partition=index % 3,
                trace_id=rng.getrandbits(64),
                queue_wait_s=wait,
                run_time_s=run,
                e2e_latency_s=e2e,
                deadline=at - e2e + 0.25 if e2e is not None else at + 1.0,
                met=(e2e <= 0.25) if e2e is not None else None,
                emitted_at=at,
                sample_ratio=ratio,
            )
        )
    return spans


def produce_spans(
    settings: KafkaSettings,
    topic: str,
    spans: list[Span],
    extra: list[tuple[bytes, list[tuple[str, str | bytes | None]]]],
) -> None:
    """Produce spans as workers do (key, fingerprint header), then the ``extra`` raw records."""
    producer, errors = make_producer(settings, **{"linger.ms": 20})
    headers: list[tuple[str, str | bytes | None]] = list(SPAN_CODEC.headers())
    for span in spans:
        producer.produce(topic, encode_span(span), span_key(span.trace_id), headers=headers)
        producer.poll(0)
    for value, extra_headers in extra:
        producer.produce(topic, value, None, headers=extra_headers)
    flush_or_raise(producer, None, timeout=30)
    errors.raise_fatal()


@dataclass(frozen=True)
class Expected:
    """One group's statistics computed directly: exact values, sorted samples for percentile checks."""

    count: int
    run_times: list[float]
    queue_waits: list[float]
    e2e: list[float]
    deadline_miss_ratio: float | None
    true_processing_rate: float


def direct_stats(
    spans: list[Span], window_s: float, slide_s: float
) -> dict[tuple[str, str, str, float, float], Expected]:
    """Per (pipeline, operator, tenant, window start, window end), in plain Python."""
    groups: dict[tuple[str, str, str, float, float], list[Span]] = defaultdict(list)
    for span in spans:
        last_start = math.floor(span.emitted_at / slide_s) * slide_s
        start = last_start
        while start > span.emitted_at - window_s:
            groups[(span.pipeline_id, span.operator_id, span.tenant_id, start, start + window_s)].append(span)
            start -= slide_s
    result: dict[tuple[str, str, str, float, float], Expected] = {}
    for key, members in groups.items():
        sinks = [s for s in members if s.met is not None]
        sink_weight = sum(1 / s.sample_ratio for s in sinks)
        missed = sum(1 / s.sample_ratio for s in sinks if not s.met)
        busy = sum(s.run_time_s / s.sample_ratio for s in members)
        result[key] = Expected(
            count=len(members),
            run_times=sorted(s.run_time_s for s in members),
            queue_waits=sorted(s.queue_wait_s for s in members),
            e2e=sorted(s.e2e_latency_s for s in sinks if s.e2e_latency_s is not None),
            deadline_miss_ratio=missed / sink_weight if sinks else None,
            true_processing_rate=sum(1 / s.sample_ratio for s in members) / busy,
        )
    return result


def rank_bounds(values: list[float], p: float, accuracy: int) -> tuple[float, float]:
    """The values between which an approximate percentile with rank error ``n / accuracy`` must lie.

    One extra rank either side covers the convention of which element is "the" p-th percentile
    (numpy interpolates, Spark returns the element at rank ceil(p * n)).
    """
    n = len(values)
    slack = n / accuracy + 1
    low = max(1, math.floor(p * n - slack))
    high = min(n, math.ceil(p * n + slack))
    return values[low - 1], values[high - 1]
