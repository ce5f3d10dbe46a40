"""Count a system's outputs as they arrive, and sample its CPU time at the first and the last one.

Runs as its own process (``python benchmarks/scenarios/peers/counter.py ...`` from cadenza's venv), so reading
the outputs back takes no CPU from the process under test beyond what the machine shares anyway.
Protocol on stdio: it prints ``ready`` once its consumer is set up, then reads ``pid N`` (the system's
process) from stdin, counts, and prints one JSON line with what it saw. Completion is judged by
counting output records, never by watermarks (the embedded broker under-reports them).

The CPU samples come from ``/proc/PID/stat`` (user + system time of every thread of the process),
taken at the moment the first and the expected-last output are read, so CPU spent importing, joining
the group and shutting down is left out, like the wall-clock time.

``--windowed final|updates`` (the windowed workload): every output is parsed as a window result
(:func:`peers.windowed.parse_result`) and the run is complete once ``--expected`` distinct windows
(``final``) or ``--expected`` results of data records (``updates``) have been read; what was read goes
to ``--results`` as JSON, for the harness to compare with its brute-force counts.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Literal

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from peers.windowed import WindowTally

__all__ = ["proc_cpu_seconds"]

_TICKS = os.sysconf("SC_CLK_TCK")


def proc_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of ``pid`` so far (all threads), or None if it no longer exists."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            stat = handle.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses; the rest follows the last ')'.
    fields = stat.rsplit(")", 1)[1].split()
    state, utime, stime = fields[0], int(fields[11]), int(fields[12])
    if state == "Z":
        return None
    return (utime + stime) / _TICKS


def count(
    bootstrap: str,
    topic: str,
    partitions: int,
    expected: int,
    timeout: float,
    *,
    windowed: Literal["final", "updates"] | None = None,
    tally: WindowTally | None = None,
) -> dict[str, Any]:
    """Read ``topic`` until ``expected`` outputs (window results: see the module doc) or the timeout."""
    if windowed is not None and tally is None:
        raise ValueError("a windowed count needs a tally to keep the results in")
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "cadenza-bench-counter",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 20,
        }
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    print("ready", flush=True)
    line = sys.stdin.readline().split()
    if len(line) != 2 or line[0] != "pid":
        raise SystemExit(f"expected 'pid N' on stdin, got {line!r}")
    pid = int(line[1])
    seen = 0
    first_at = last_at = cpu_first = cpu_last = None
    exited = False
    deadline = time.monotonic() + timeout
    next_check = time.monotonic() + 1.0
    while seen < expected:
        now = time.monotonic()
        if now > deadline:
            break
        if now > next_check:
            next_check = now + 1.0
            if proc_cpu_seconds(pid) is None:
                exited = True
                break
        for message in consumer.consume(10_000, 0.05):
            if message.error() is not None:
                continue
            if tally is None:
                seen += 1
            else:
                tally.read(message.key(), message.value())
                seen = len(tally.counts) if windowed == "final" else tally.outputs
            if first_at is None and seen:
                first_at, cpu_first = time.monotonic(), proc_cpu_seconds(pid)
        if seen >= expected:
            last_at, cpu_last = time.monotonic(), proc_cpu_seconds(pid)
    consumer.close()
    return {
        "outputs": seen,
        "first_at": first_at,
        "last_at": last_at,
        "cpu_first_s": cpu_first,
        "cpu_last_s": cpu_last,
        "system_exited": exited,
        "timed_out": seen < expected and not exited,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description="count a system's outputs")
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--partitions", type=int, required=True)
    parser.add_argument("--expected", type=int, required=True)
    parser.add_argument("--timeout", type=float, required=True)
    parser.add_argument("--windowed", choices=("final", "updates"), default=None)
    parser.add_argument("--results", type=Path, default=None, help="where a windowed count writes its tally")
    args = parser.parse_args()
    if (args.windowed is None) != (args.results is None):
        raise SystemExit("--windowed and --results go together")
    tally = WindowTally() if args.windowed else None
    result = count(
        args.bootstrap,
        args.topic,
        args.partitions,
        args.expected,
        args.timeout,
        windowed=args.windowed,
        tally=tally,
    )
    if tally is not None:
        args.results.write_text(json.dumps(tally.to_json()))
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
