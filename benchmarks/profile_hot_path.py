"""Where a record's CPU goes on the worker's hot path: a cProfile table of admit and of run.

Same set-up as ``bench_hot_path.py`` (in-memory ``Message`` objects, a started worker, filter -> map
-> sink): one warm-up round, then ``admit`` and ``run_for`` are profiled separately, so the table
says which stage a cost belongs to. Function calls per record (cProfile's call count over the
records) is the figure that moves with structural changes; the times are inflated by the profiler
itself and only their proportions mean something.

    python benchmarks/profile_hot_path.py --mode cameo --out benchmarks/results/<date> --label before
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import uuid
from pathlib import Path

from bench_hot_path import messages, run_unscheduled
from bench_worker import PARTITIONS, Event, enrich, is_purchase

from cadenza.infra.broker.embedded import EmbeddedBroker
from cadenza.infra.kafka.clients import make_admin
from cadenza.infra.kafka.topics import TopicSpec, ensure_topics
from cadenza.pipelines import Pipeline
from cadenza.settings import KafkaSettings
from cadenza.worker import Worker


def _table(profile: cProfile.Profile, records: int, top: int) -> tuple[str, int]:
    stream = io.StringIO()
    stats = pstats.Stats(profile, stream=stream)
    calls = int(stats.total_calls)  # type: ignore[attr-defined]
    stream.write(f"{calls} function calls for {records} records: {calls / records:.1f} per record\n")
    stats.sort_stats("tottime").print_stats(top)
    return stream.getvalue(), calls


def profile(settings: KafkaSettings, mode: str, records: int, top: int) -> dict[str, tuple[str, int]]:
    suffix = uuid.uuid4().hex[:8]
    source, sink = f"prof-in-{suffix}", f"prof-out-{suffix}"
    ensure_topics(make_admin(settings), [TopicSpec(source, PARTITIONS), TopicSpec(sink, PARTITIONS)])
    pipeline = Pipeline(f"prof-{suffix}", tenant="bench", latency_target="1s")
    pipeline.source(source, value=Event).filter(is_purchase).map(enrich).sink(sink)
    policy = "fifo" if mode == "unscheduled" else mode
    worker = Worker([pipeline], settings, group=f"prof-{suffix}", policy=policy, max_buffered=records + 1)
    worker.start()
    output = worker._output
    assert output is not None
    tables: dict[str, tuple[str, int]] = {}
    try:
        for round_ in range(2):  # the first round warms up
            batch = messages(source, records)
            if mode == "unscheduled":
                prof = cProfile.Profile()
                prof.enable()
                run_unscheduled(worker, batch)
                prof.disable()
                if round_:
                    tables["run"] = _table(prof, records, top)
            else:
                admit, run = cProfile.Profile(), cProfile.Profile()
                admit.enable()
                worker.admit(batch)
                admit.disable()
                run.enable()
                worker.run_for(3600.0)
                run.disable()
                if round_:
                    tables["admit"] = _table(admit, records, top)
                    tables["run"] = _table(run, records, top)
            output.flush()
    finally:
        worker.close()
    return tables


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=("unscheduled", "fifo", "cameo", "fair"), default="cameo")
    parser.add_argument("--records", type=int, default=5_000)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--label", default="now", help="file name part: before, after, ...")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = parser.parse_args()
    with EmbeddedBroker() as broker:
        settings = KafkaSettings.load(bootstrap_servers=broker.bootstrap_servers)
        tables = profile(settings, args.mode, args.records, args.top)
    args.out.mkdir(parents=True, exist_ok=True)
    summary: dict[str, object] = {"mode": args.mode, "records": args.records}
    for stage, (text, calls) in tables.items():
        path = args.out / f"profile-{args.label}-{args.mode}-{stage}.txt"
        path.write_text(text)
        summary[f"{stage}_calls_per_record"] = round(calls / args.records, 1)
        print(f"wrote {path}")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
