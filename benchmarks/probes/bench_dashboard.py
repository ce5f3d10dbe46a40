"""What the dashboard costs per refresh: one poll (scrape text -> parse -> windowed numbers -> one
history point) and the JSON the page fetches each second, full history against the incremental one.

The worker is a real ``PrometheusExporter`` shaped like S1's (two tenants, eight operators, twelve
partitions) read through ``parse_exposition`` in-process, so the network is not in the numbers;
the clock is virtual (one poll per simulated second), so 600 polls fill the default history.

    .venv/bin/python benchmarks/probes/bench_dashboard.py
"""

from __future__ import annotations

import json
import statistics
import time

from cadenza.dashboard import Dashboard, WorkerSnapshot, parse_exposition
from cadenza.infra.metrics import names
from cadenza.infra.metrics.prometheus import PrometheusExporter
from cadenza.scheduling.clock import VirtualClock

POLLS = 600


def s1_like_exporter() -> PrometheusExporter:
    exporter = PrometheusExporter()
    partitions: dict[tuple[str, ...], float | int] = {
        (f"topic{t}", str(p)): 5 for t in range(3) for p in range(4)
    }
    exporter.register_callback(names.LATENCY_TARGET, lambda: {("LS", "ls"): 0.3, ("BA", "ba"): 5.0})
    exporter.register_callback(names.CONSUMER_LAG, lambda: partitions)
    exporter.register_callback(names.PARTITION_BUFFERED_RECORDS, lambda: partitions)
    return exporter


def main() -> None:
    exporter = s1_like_exporter()
    operators = [exporter.operator("LS", "ls", f"op{i}", sink=i == 4) for i in range(5)]
    operators += [exporter.operator("BA", "ba", f"op{i}", sink=i == 2) for i in range(3)]
    clock = VirtualClock(0.0)

    def scrape(url: str, at: float) -> WorkerSnapshot:
        return parse_exposition(exporter.render().decode(), at)

    board = Dashboard(["worker:9464"], clock=clock, scraper=scrape, history=POLLS)
    polls: list[float] = []
    views: list[float] = []
    for i in range(POLLS):
        for ops in operators:
            for _ in range(20):
                ops.record_run(0.001 * (i % 7), 0.0005)
            if ops.sink:
                ops.record_sink(0.05 * (i % 5), i % 3 != 0)
        started = time.perf_counter()
        board.poll()
        polls.append(time.perf_counter() - started)
        started = time.perf_counter()
        board.view(since=clock.now() - 1.0)
        views.append(time.perf_counter() - started)
        clock.advance(1.0)
    full = len(json.dumps(board.view()))
    incremental = len(json.dumps(board.view(since=clock.now() - 1.5)))
    board.close()
    print(
        f"poll: median {statistics.median(polls) * 1e3:.2f} ms, min {min(polls) * 1e3:.2f} ms ({POLLS} polls)"
    )
    print(f"view (incremental): median {statistics.median(views) * 1e3:.2f} ms")
    print(f"JSON per refresh: full history {full / 1024:.0f} KiB, incremental {incremental / 1024:.1f} KiB")


if __name__ == "__main__":
    main()
