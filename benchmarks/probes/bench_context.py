"""Micro-benchmark of the per-record scheduling paths: the ``cadenza-ctx`` codec and the scheduler.

Every fetched record is decoded, every produced one encoded, and every record passes through one
enqueue and (a share of) one pick, so these costs bound the S2 overhead of ``cameo`` versus ``fifo``.
Numbers are per call, in microseconds: the best of the repeats (the least disturbed run, the usual
timeit reading) and their median. Absolute values drift with the machine; compare within one run.

    .venv/bin/python benchmarks/probes/bench_context.py --out results/
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

# The scenarios' modules (``_common``, ``bench_hot_path``, ...) are in ../scenarios.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scenarios"))

from _common import environment, per_call_us, write_result

from cadenza.operators.window_assigners import TumblingWindows
from cadenza.scheduling import (
    Scheduler,
    SchedulingContext,
    SchedulingPolicy,
    SourceRecordInfo,
    decode_context,
    encode_context,
    get_policy,
)
from cadenza.worker.engine.context_stamps import WindowRelease, close_function


def _typical_context() -> SchedulingContext:
    return SchedulingContext(
        pipeline_id="fraud-score",
        tenant_id="tenant-ls",
        frontier_time=time.time(),
        latency_target=0.1,
        priority=time.time() + 0.09,
        path_cost=0.0023,
        hops=2,
        trace_id=random.getrandbits(64),
    )


def bench_codec(number: int, repeat: int) -> dict[str, dict[str, float]]:
    ctx = _typical_context()
    data = encode_context(ctx)
    garbled = b"\x01" + data[1:-1]  # one byte short: refused after the length check
    # More distinct (pipeline, tenant) pairs than the id cache holds, cycled: every decode misses it.
    many = [encode_context(_typical_context_with(i)) for i in range(4096)]
    cursor = iter(range(1 << 62))

    def decode_uncached() -> object:
        return decode_context(many[next(cursor) & 4095])

    return {
        "encode": per_call_us(lambda: encode_context(ctx), number, repeat),
        "decode": per_call_us(lambda: decode_context(data), number, repeat),
        "decode_uncached_ids": per_call_us(decode_uncached, number, repeat),
        "decode_garbled": per_call_us(lambda: decode_context(garbled), number, repeat),
        "header_bytes": {"typical": float(len(data))},
    }


def _typical_context_with(i: int) -> SchedulingContext:
    ctx = _typical_context()
    ctx.pipeline_id = f"pipeline-{i}"
    return ctx


def _contexts(policy: SchedulingPolicy, count: int, rng: random.Random) -> list[SchedulingContext]:
    now = time.time()
    tenants = ["ls", "ba", "t3", "t4"]
    return [
        policy.build_ctx_at_source(
            SourceRecordInfo(
                pipeline_id=f"p{i % 16}",
                tenant_id=tenants[i % 4],
                latency_target=rng.choice([0.05, 0.1, 1.0, 60.0]),
                arrival_time=now + i * 1e-5,
                offset=i,
                partition=i % 8,
            )
        )
        for i in range(count)
    ]


def bench_window_close(number: int, repeat: int) -> dict[str, dict[str, float]]:
    """A windowed record's close, as its deadline needs it: the plain close of its own window, and the
    :class:`WindowRelease` tracker (which also finds the record releasing an earlier window).

    Records at 300/s on 4 partitions with a 1 s tumbling window, so releases happen as in S1's LS.
    """
    delay = 0.05
    close = close_function(TumblingWindows(1.0), delay)
    release = WindowRelease(close, delay)
    start = time.time()
    times = [start + i / 300.0 for i in range(1 << 16)]
    cursor = iter(range(1 << 62))

    def tracked() -> float:
        i = next(cursor)
        return release(i & 3, times[i & 0xFFFF])

    return {
        "own_window_close": per_call_us(lambda: close(start), number, repeat),
        "window_release": per_call_us(tracked, number, repeat),
    }


def bench_scheduler(policy_name: str, partitions: int, records: int, repeat: int) -> dict[str, float | int]:
    """Per-record cost of enqueue + pick, in two regimes, with ``partitions`` operator-partitions.

    steady: every queue holds about one record, so each record is one heap push and one pop (the
    worst case for the heap: no batching). backlog: queues are long and quanta take 16 records.
    """
    rng = random.Random(42)
    steady: list[float] = []
    backlog: list[float] = []
    probe = get_policy(policy_name)
    if probe.time_dependent and not probe.monotone_priority:
        records = max(1_000, records // 20)  # heads are scanned per pick: O(partitions), keep the run short
    for _ in range(repeat):
        policy = get_policy(policy_name)
        contexts = _contexts(policy, records, rng)
        keys = [rng.randrange(partitions) for _ in range(records)]

        sched: Scheduler[int, int] = Scheduler(policy, max_records=1, max_seconds=None)
        for key in range(partitions):
            sched.enqueue(key, contexts[key], key)
        start = time.perf_counter()
        for i in range(records):
            quantum = sched.next_batch()
            assert quantum is not None
            next(quantum)
            sched.enqueue(keys[i], contexts[i], i)
        steady.append((time.perf_counter() - start) / records * 1e6)

        sched = Scheduler(policy, max_records=16, max_seconds=None)
        start = time.perf_counter()
        for i in range(records):
            sched.enqueue(keys[i], contexts[i], i)
        taken = 0
        while (quantum := sched.next_batch()) is not None:
            for _ in quantum:
                taken += 1
        backlog.append((time.perf_counter() - start) / records * 1e6)
        assert taken == records
    return {
        "records": records,
        "steady_best_us": round(min(steady), 4),
        "steady_median_us": round(statistics.median(steady), 4),
        "backlog_best_us": round(min(backlog), 4),
        "backlog_median_us": round(statistics.median(backlog), 4),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, help="directory for context_codec.json")
    parser.add_argument("--number", type=int, default=100_000, help="codec calls per repeat")
    parser.add_argument("--repeat", type=int, default=7, help="repeats (best and median are reported)")
    parser.add_argument("--partitions", type=int, default=300, help="operator-partitions in the scheduler")
    parser.add_argument("--records", type=int, default=100_000, help="records per scheduler repeat")
    parser.add_argument(
        "--policies", default="fifo,cameo,fair", help="comma-separated policies for the scheduler benchmark"
    )
    args = parser.parse_args(argv)

    result: dict[str, object] = {
        **environment(),
        "settings": {
            "number": args.number,
            "repeat": args.repeat,
            "partitions": args.partitions,
            "records": args.records,
        },
        "codec": bench_codec(args.number, args.repeat),
        "window_close": bench_window_close(args.number, args.repeat),
        "scheduler": {
            name: bench_scheduler(name, args.partitions, args.records, args.repeat)
            for name in args.policies.split(",")
        },
    }
    codec = result["codec"]
    assert isinstance(codec, dict)
    print(f"cadenza-ctx codec (typical header {int(codec['header_bytes']['typical'])} bytes), us per call:")
    for name in ["encode", "decode", "decode_uncached_ids", "decode_garbled"]:
        print(f"  {name:20s} best {codec[name]['best_us']:7.3f}   median {codec[name]['median_us']:7.3f}")
    windowed = result["window_close"]
    assert isinstance(windowed, dict)
    print("a windowed record's close, us per record:")
    for name, numbers in windowed.items():
        print(f"  {name:20s} best {numbers['best_us']:7.3f}   median {numbers['median_us']:7.3f}")
    print(f"scheduler, {args.partitions} operator-partitions, us per record (enqueue + pick):")
    scheduler = result["scheduler"]
    assert isinstance(scheduler, dict)
    for name, numbers in scheduler.items():
        print(
            f"  {name:6s} steady (quantum 1) best {numbers['steady_best_us']:7.3f} "
            f"median {numbers['steady_median_us']:7.3f}   "
            f"backlog (quantum 16) best {numbers['backlog_best_us']:7.3f} "
            f"median {numbers['backlog_median_us']:7.3f}"
        )
    if args.out is not None:
        write_result(args.out, "context_codec.json", result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
