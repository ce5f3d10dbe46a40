"""How long S1's LS windows wait for their watermark, with LS alone on one in-process worker.

S1's LS pipeline (clicks keyed by user -> key_by(user) -> 1 s tumbling count, 50 ms
out-of-orderness) at 300 clicks/s for ``--seconds``, under cameo, on the embedded broker. Each
repartition partition gets data from one upstream partition only (the source is keyed by the same
user), so it hears of the others through progress records (see ``docs/concepts/watermarks.md``).
Reports the worker's ``cadenza_window_close_wait_seconds`` p50/p99 (interpolated in the buckets) with
progress sent early when an input passes a window close (the worker's rule) and, for comparison, on the
``progress_interval`` timer only; rounds alternate the two.

    python benchmarks/probes/bench_close_wait.py [--seconds 20] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import random
import threading
import time
import uuid
from collections.abc import Sequence

from pydantic import BaseModel

from cadenza.infra.broker.embedded import EmbeddedBroker
from cadenza.infra.kafka.clients import make_admin, make_producer
from cadenza.infra.kafka.topics import TopicSpec, ensure_topics
from cadenza.infra.metrics.prometheus import LatencyHistogram, PrometheusExporter
from cadenza.pipelines import Pipeline, Tumbling
from cadenza.settings import KafkaSettings
from cadenza.worker import Worker
from cadenza.worker.config import WorkerConfig
from cadenza.worker.engine import progress as runtime  # where the engine asks whether progress is due
from cadenza.worker.engine.operators import routing
from cadenza.worker.parts import WorkerParts


class Visit(BaseModel):
    user: str
    page: str
    ts: float


def user_of(visit: Visit) -> str:
    return visit.user


def timer_only(keyed: Sequence[routing.KeyByOp], elapsed: float, interval: float) -> bool:
    """Progress on the interval alone (the rule before early progress), for comparison."""
    return elapsed >= interval


def quantile_ms(histogram: LatencyHistogram, q: float) -> float:
    """Quantile ``q`` in ms, linear inside its bucket (as Prometheus' histogram_quantile)."""
    rank = q * histogram.count
    seen, lower = 0, 0.0
    for bound, count in zip((*histogram.bounds, float("inf")), histogram.counts, strict=True):
        if count and seen + count >= rank:
            if bound == float("inf"):
                return lower * 1000
            return (lower + (bound - lower) * (rank - seen) / count) * 1000
        seen += count
        lower = bound
    return lower * 1000


def run_once(
    settings: KafkaSettings, *, early: bool, seconds: float, rate: float = 300.0
) -> dict[str, float]:
    # The worker's loop looks the rule up in its module at each step: swap it for this run.
    setattr(runtime, "progress_due", routing.progress_due if early else timer_only)  # noqa: B010
    suffix = uuid.uuid4().hex[:6]
    source, out = f"cw-in-{suffix}", f"cw-out-{suffix}"
    ensure_topics(make_admin(settings), [TopicSpec(source, 4), TopicSpec(out, 4)])
    name = f"cw-{suffix}"
    pipeline = Pipeline(name, tenant="LS", latency_target="0.3s")
    (
        pipeline.source(source, value=Visit, timestamp="ts", max_out_of_orderness="50ms")
        .key_by(user_of)
        .window(Tumbling("1s"))
        .count()
        .sink(out)
    )
    exporter = PrometheusExporter()
    worker = Worker(
        [pipeline],
        settings,
        WorkerConfig(group=f"g-{name}", policy="cameo"),
        parts=WorkerParts(exporter=exporter),
    )
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        if not worker.wait_assigned(60):
            raise RuntimeError("the worker got no partitions within 60 s")
        producer, _ = make_producer(settings, **{"enable.idempotence": False, "linger.ms": 2})
        rng = random.Random(1)
        started = time.time()
        sent = 0
        while time.time() - started < seconds:
            for _ in range(int((time.time() - started) * rate) - sent):
                user = f"u{rng.randrange(40)}"
                value = {"user": user, "page": "/p", "ts": time.time()}
                producer.produce(source, json.dumps(value).encode(), user.encode())
                sent += 1
            producer.poll(0)
            time.sleep(0.003)
        producer.flush(10)
        time.sleep(2.0)
        window = next(w for s in worker.engine.schedules for w in s.task.windows)
        histogram = exporter.operator("LS", name, window.node_id).window_close_wait
        return {
            "results": histogram.count,
            "close_wait_p50_ms": round(quantile_ms(histogram, 0.5), 1),
            "close_wait_p99_ms": round(quantile_ms(histogram, 0.99), 1),
            "progress_records": worker.counters.progress_records,
        }
    finally:
        setattr(runtime, "progress_due", routing.progress_due)  # noqa: B010
        worker.stop()
        thread.join(30)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    with EmbeddedBroker() as broker:
        settings = KafkaSettings.load(bootstrap_servers=broker.bootstrap_servers)
        for round_ in range(args.rounds):
            for early in (False, True):
                figures = run_once(settings, early=early, seconds=args.seconds)
                mode = "early progress" if early else "timer only    "
                print(f"round {round_ + 1} {mode}: {figures}", flush=True)


if __name__ == "__main__":
    main()
