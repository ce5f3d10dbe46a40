"""Per-record scheduling cost as the number of operator-partitions and tenants grows.

No broker and no operators: only what the scheduler and the policy do per record, in a steady state
where every operator-partition has records waiting (so every pick chooses among all of them):
building the record's source context (``build_ctx_at_source``), queueing it, picking the next
operator-partition (quanta of one record, so every record costs a pick) and folding the quantum's
reply into the policy. Time is simulated with a :class:`~cadenza.scheduling.VirtualClock` that
advances by a fixed run time per record, so the policy sees the same state on every machine and
only the CPU cost varies.

Scenarios: ``cameo`` with 10, 1,000 and 100,000 operator-partitions, once with every record on time
and once overloaded (latency target shorter than the backlog: every head is tardy, its priority
moves with the clock); ``fair`` with 10, 100 and 1,000 tenants of 10 operator-partitions each.

    python benchmarks/probes/bench_scheduler_scale.py --out benchmarks/results/<date>
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path
from typing import Any

# The scenarios' modules (``_common``, ``bench_hot_path``, ...) are in ../scenarios.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scenarios"))

from _common import environment, write_result

from cadenza.scheduling import (
    CameoPolicy,
    FairPolicy,
    Reply,
    Scheduler,
    SchedulingPolicy,
    SourceRecordInfo,
    VirtualClock,
)

RUN_TIME = 10e-6  # simulated seconds per record


def measure(
    policy: SchedulingPolicy, partitions: int, tenants: int, latency_target: float, records: int
) -> float:
    """Microseconds of CPU per record (context, enqueue, pick, reply) in the steady state."""
    clock = VirtualClock(1_000_000.0)
    sched: Scheduler[int, int] = Scheduler(policy, clock=clock, max_records=1, max_seconds=None)
    infos = [
        SourceRecordInfo("p", f"tenant-{p % tenants}", latency_target, 0.0, 0, p, operator_id="op")
        for p in range(partitions)
    ]
    build = policy.build_ctx_at_source
    reply = policy.process_ctx_from_reply

    def admit(partition: int, offset: int) -> None:
        info = infos[partition]
        info.arrival_time = clock.now()
        info.offset = offset
        sched.enqueue(partition, build(info), offset)

    for offset in range(2):  # every operator-partition has a head and one behind it
        for partition in range(partitions):
            admit(partition, offset)
    step = 7919  # a prime: arrivals visit the partitions in a scattered order

    def one(i: int) -> None:
        admit(i * step % partitions, i + 2)
        quantum = sched.next_batch()
        assert quantum is not None
        for ctx, _ in quantum:
            clock.advance(RUN_TIME)
            reply(Reply("p", "op", ctx.tenant_id, RUN_TIME, 0.0, clock.now(), 1))

    warm_up = 1_000  # overloaded: the first picks find every head tardy at once (a one-off move)
    for i in range(warm_up):
        one(i)
    gc.collect()
    gc.disable()
    try:
        started = time.thread_time()
        for i in range(warm_up, warm_up + records):
            one(i)
        elapsed = time.thread_time() - started
    finally:
        gc.enable()
    assert len(sched) == 2 * partitions  # one in, one out per record: the backlog stayed the same
    return elapsed / records * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument(
        "--max-partitions",
        type=int,
        default=None,
        help="skip scenarios with more operator-partitions (an older scheduler may need hours for 100,000)",
    )
    args = parser.parse_args()
    # (name, x, policy factory, partitions, tenants, latency target)
    scenarios: list[tuple[str, int, Any, int, int, float]] = []
    for n in (10, 1_000, 100_000):
        # On time: the backlog (2n records of RUN_TIME each) is far below the target.
        scenarios.append(("cameo on time", n, CameoPolicy, n, 1, 100.0))
        # Overloaded: a target of 1 ms against a backlog of 2n records: heads are tardy.
        scenarios.append(("cameo overloaded", n, CameoPolicy, n, 1, 0.001))
    for t in (10, 100, 1_000):
        scenarios.append(("fair", t, FairPolicy, 10 * t, t, 1.0))
    results: list[dict[str, Any]] = []
    for name, x, make, partitions, tenants, target in scenarios:
        if args.max_partitions is not None and partitions > args.max_partitions:
            continue
        runs = [measure(make(), partitions, tenants, target, args.records) for _ in range(args.repeat)]
        row = {
            "scenario": name,
            "x": x,
            "partitions": partitions,
            "tenants": tenants,
            "latency_target_s": target,
            "median_us": round(statistics.median(runs), 3),
            "min_us": round(min(runs), 3),
            "runs_us": [round(r, 3) for r in runs],
        }
        results.append(row)
        print(
            f"{name:17s} partitions {partitions:7d} tenants {tenants:5d}: {row['median_us']:7.3f} us/record"
        )
    result = {
        "benchmark": "scheduler_scale_us_per_record",
        "what": "build_ctx_at_source + enqueue + next_batch (quanta of 1) + reply, steady backlog",
        "records_per_run": args.records,
        "results": results,
        **environment(),
    }
    write_result(args.out, "scheduler_scale.json", result)
    plot(results, args.out / "scheduler_scale.png")


def plot(results: list[dict[str, Any]], path: Path) -> None:
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for name in dict.fromkeys(r["scenario"] for r in results):
        rows = [r for r in results if r["scenario"] == name]
        label = f"{name} (x = tenants)" if name == "fair" else f"{name} (x = operator-partitions)"
        ax.plot([r["x"] for r in rows], [r["median_us"] for r in rows], marker="o", label=label)
    ax.set_xscale("log")
    ax.set_ylim(bottom=0)
    ax.set_xlabel("operator-partitions, or tenants for fair")
    ax.set_ylabel("CPU us per record (median)")
    ax.set_title("Scheduling cost per record vs scale")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
