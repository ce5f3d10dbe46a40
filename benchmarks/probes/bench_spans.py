"""Micro-benchmark of the per-record metrics paths: ``SpanEmitter.emit`` and Prometheus recording.

The worker calls ``emit`` once per operator execution of a record and records one run in its
Prometheus series, so both bound the metrics overhead of every record (benchmark S2). Measured:

- ``emit`` at sampling 1.0 (every span buffered) and 0.01 (almost every call ends at the sampling
  test): the executor's cost, the buffer being drained outside the timed loops;
- ``send``: what the sender thread spends per span to encode it (``SpanWriter``) and hand it to a
  sink (a null sink here, so Kafka's own cost is not in it); off the executor, but it shares the
  GIL; ``encode_span_fastavro`` is the same encoding through fastavro, for comparison;
- ``record_run``: the pre-bound lock-free series of ``PrometheusExporter`` against prometheus_client's
  own labelled ``Counter`` + two ``Histogram`` children doing the same updates.

Numbers are microseconds per call, loop overhead included: the best of the repeats (the least
disturbed run) and their median. Absolute values drift with the machine; compare within one run.

    .venv/bin/python benchmarks/probes/bench_spans.py --out results/
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

# The scenarios' modules (``_common``, ``bench_hot_path``, ...) are in ../scenarios.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scenarios"))

from _common import environment, per_call_us, summary_us, write_result
from prometheus_client import CollectorRegistry, Counter, Histogram

from cadenza.infra.metrics import Span, SpanEmitter, encode_span, names
from cadenza.infra.metrics.prometheus import PrometheusExporter


class NullSink:
    """Accepts everything and keeps nothing: the sender's own cost, without a transport."""

    delivered = 0
    failed = 0

    def send(self, key: bytes, value: bytes) -> bool:
        return True

    def poll(self) -> None:
        pass

    def flush(self, timeout: float) -> int:
        return 0

    def close(self, timeout: float) -> None:
        pass


def bench_emit(ratio: float, number: int, repeat: int, chunk: int = 10_000) -> dict[str, float]:
    """``emit`` per call; the buffer is drained between timed chunks so it never fills."""
    rng = random.Random(1)
    traces = [rng.getrandbits(64) for _ in range(chunk)]
    emitter = SpanEmitter(NullSink(), worker_id="bench", sample_ratio=ratio, batch_size=chunk, linger=600.0)
    emit = emitter.emit
    t_f = time.time()
    results: list[float] = []
    kept = 0
    for _ in range(repeat):
        elapsed = 0.0
        for _ in range(max(1, number // chunk)):
            start = time.perf_counter()
            for trace in traces:
                emit(
                    "tenant-ls", "fraud-score", "score", 3, trace, 0.0012, 0.0004, t_f, 0.1, t_f + 0.05, False
                )
            elapsed += time.perf_counter() - start
            kept += emitter.buffered
            emitter.flush()  # no sender thread: drains inline, untimed
        results.append(elapsed / (max(1, number // chunk) * chunk) * 1e6)
    assert emitter.dropped == 0
    summary = summary_us(results)
    summary["kept_share"] = round(kept / (repeat * max(1, number // chunk) * chunk), 4)
    return summary


def bench_send(number: int, repeat: int) -> dict[str, float]:
    """Sender-side cost per span: derive the span, encode it, key it, hand it to a sink."""
    rng = random.Random(2)
    t_f = time.time()
    results: list[float] = []
    for _ in range(repeat):
        emitter = SpanEmitter(
            NullSink(), worker_id="bench", batch_size=number, linger=600.0, max_buffered=number
        )
        for i in range(number):
            emitter.emit(
                "tenant-ls",
                "fraud-score",
                "sink",
                3,
                rng.getrandbits(64),
                0.0012,
                0.0004,
                t_f,
                0.1,
                t_f + 0.05,
                i % 2 == 0,
            )
        start = time.perf_counter()
        sent = emitter.poll()
        results.append((time.perf_counter() - start) / number * 1e6)
        assert sent == number
    return summary_us(results)


def bench_fastavro_encode(number: int, repeat: int) -> dict[str, float]:
    t_f = time.time()
    span = Span.from_run(
        "bench",
        ("tenant-ls", "fraud-score", "sink", 3, 2**63 + 5, 0.0012, 0.0004, t_f, 0.1, t_f + 0.05, True),
    )
    return per_call_us(lambda: encode_span(span), number, repeat)


def bench_record(number: int, repeat: int) -> dict[str, dict[str, float]]:
    """One run recorded (processed += 1, queue wait and run time observed), both ways."""
    ops = PrometheusExporter().operator("tenant-ls", "fraud-score", "score")
    registry = CollectorRegistry()
    labels = names.OPERATOR_LABELS
    processed = Counter(names.RECORDS_PROCESSED.name, "x", labels, registry=registry)
    queue_wait = Histogram(
        names.QUEUE_WAIT.name, "x", labels, registry=registry, buckets=names.LATENCY_BUCKETS
    )
    run_time = Histogram(names.RUN_TIME.name, "x", labels, registry=registry, buckets=names.LATENCY_BUCKETS)
    bound = ("tenant-ls", "fraud-score", "score")
    processed_child = processed.labels(*bound)
    wait_child = queue_wait.labels(*bound)
    run_child = run_time.labels(*bound)

    def cadenza() -> None:
        ops.record_run(0.0012, 0.0004)

    def client() -> None:
        processed_child.inc()
        wait_child.observe(0.0012)
        run_child.observe(0.0004)

    return {
        "cadenza_prebound": per_call_us(cadenza, number, repeat),
        "prometheus_client_children": per_call_us(client, number, repeat),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, help="directory for spans.json")
    parser.add_argument("--number", type=int, default=200_000, help="calls per repeat")
    parser.add_argument("--repeat", type=int, default=5, help="repeats (best and median are reported)")
    args = parser.parse_args(argv)

    result: dict[str, object] = {
        **environment(),
        "settings": {"number": args.number, "repeat": args.repeat},
        "emit": {
            "ratio_1.0": bench_emit(1.0, args.number, args.repeat),
            "ratio_0.01": bench_emit(0.01, args.number, args.repeat),
        },
        "send_per_span": bench_send(min(args.number, 50_000), args.repeat),
        "encode_span_fastavro": bench_fastavro_encode(min(args.number, 50_000), args.repeat),
        "record_run": bench_record(args.number, args.repeat),
    }
    emit = result["emit"]
    record = result["record_run"]
    send = result["send_per_span"]
    assert isinstance(emit, dict) and isinstance(record, dict) and isinstance(send, dict)
    print("SpanEmitter.emit, us per call (executor thread):")
    for name, numbers in emit.items():
        print(
            f"  sampling {name.removeprefix('ratio_'):5s} best {numbers['best_us']:7.3f}   "
            f"median {numbers['median_us']:7.3f}   (kept {numbers['kept_share']:.2%})"
        )
    fastavro = result["encode_span_fastavro"]
    assert isinstance(fastavro, dict)
    print(
        f"span sender, us per span (encode + hand to a null sink): best {send['best_us']:7.3f}   "
        f"median {send['median_us']:7.3f}   (fastavro encode alone: best {fastavro['best_us']:7.3f})"
    )
    print("one run recorded in Prometheus series (1 counter + 2 histograms), us per record:")
    for name, numbers in record.items():
        print(f"  {name:28s} best {numbers['best_us']:7.3f}   median {numbers['median_us']:7.3f}")
    if args.out is not None:
        write_result(args.out, "spans.json", result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
