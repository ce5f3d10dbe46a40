"""What a window aggregate on lessees costs the worker's loop per record: the merge of each lifted
partial into its windows, against the plain window's fold of the value.

A count and a sum per key (``key_by``) over 1 s tumbling windows (``--keys`` keys, records 10 ms
apart in event time), run through ``PipelineDriver`` twice in one process: the aggregations plain,
and declared ``parallel=2, executor="thread"``. Reported per record: the lessor's merge time
(``cadenza_lessee_merge_seconds_total`` over the calls), and the thread CPU of the whole run of
each (decode, admission, the window, the sink and, for the lessee run, the hand-off and the
release in order), so the two can be set side by side.

    cd benchmarks/probes && python lifted_merge.py --out DIR [--records 20000] [--keys 50]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scenarios"))

from _common import environment, write_result

from cadenza import Pipeline, Tumbling
from cadenza.testing import PipelineDriver

START = 1_700_000_000.0


def user(value: dict[str, Any]) -> str:
    return str(value["u"])


def amount(value: dict[str, Any]) -> float:
    return float(value["a"])


def event_time(value: dict[str, Any]) -> float:
    return float(value["t"])


def pipeline(parallel: int) -> Pipeline:
    declared = Pipeline("merge", tenant="t", latency_target="1s")
    windowed = declared.source("events", timestamp=event_time).key_by(user).window(Tumbling("1s"))
    windowed.count(parallel=parallel, executor="thread").sink("counts")
    windowed.sum(amount, parallel=parallel, executor="thread").sink("sums")
    return declared


def run(parallel: int, values: list[dict[str, Any]]) -> tuple[float, float, int, int]:
    with PipelineDriver([pipeline(parallel)], lessees=parallel > 1) as driver:
        started = time.thread_time()
        for first in range(0, len(values), 500):  # as fetches of 500 records
            chunk = values[first : first + 500]
            driver.pipe_many("events", chunk, batch=True)
        cpu = time.thread_time() - started
        hub = driver._engine.lessees
        merge = 0.0 if hub is None else sum(step.stats.merge_seconds for step in hub.steps)
        calls = 0 if hub is None else sum(s.stats.handoff_calls + s.stats.lessor_calls for s in hub.steps)
        results = len(driver.outputs("counts")) + len(driver.outputs("sums"))
    return cpu, merge, calls, results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--keys", type=int, default=50)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    values = [{"u": f"u{i % args.keys}", "a": i % 7, "t": START + i * 0.01} for i in range(args.records)]
    plain_cpu, _, _, plain_results = run(1, values)
    leased_cpu, merge, calls, leased_results = run(2, values)
    assert leased_results == plain_results > 0, (leased_results, plain_results)
    n = args.records
    result = {
        "benchmark": "lifted_merge_per_record",
        "records": n,
        "window_results": plain_results,
        "merge_us_per_call": round(merge / max(calls, 1) * 1e6, 2),
        "plain_thread_us_per_record": round(plain_cpu / n * 1e6, 2),
        "leased_thread_us_per_record": round(leased_cpu / n * 1e6, 2),
        **environment(),
    }
    write_result(args.out, f"lifted_merge-{n}.json", result)
    print(
        f"merge per lifted call {result['merge_us_per_call']:.2f} us (two aggregations, {calls} calls); "
        f"the whole run per record: plain {result['plain_thread_us_per_record']:.2f} us, with lessees "
        f"{result['leased_thread_us_per_record']:.2f} us (the loop's thread)"
    )


if __name__ == "__main__":
    main()
