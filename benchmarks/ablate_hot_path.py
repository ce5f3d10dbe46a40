"""What the pieces of the scheduled hot path cost: the same records with one piece patched out at a time.

Same set-up as ``bench_hot_path.py`` (in-memory messages of ``bench_worker.py``'s pipeline fed to a
started worker's admit and run stages, thread CPU time, the producer's flush included). Variants:

- ``unscheduled``: decode and run each record at once (``bench_hot_path.run_unscheduled``);
- ``cameo``: the worker as it is;
- ``no_sink_stamp``: the sink writes no ``cadenza-ctx`` header and records no deadline metrics;
- ``bare_executor``: quanta run their records with no clock reads, crash-slot words, pending counts,
  histograms or policy reply.

The difference between ``cameo`` and a variant is what the piece costs per record. The patched
variants are not correct workers (they exist to be measured), so this is a benchmark script only.

    python benchmarks/ablate_hot_path.py [--records 20000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from typing import Any

from bench_hot_path import messages, run_unscheduled
from bench_worker import PARTITIONS, Event, enrich, is_purchase

from cadenza.infra.broker.embedded import EmbeddedBroker
from cadenza.infra.kafka.clients import make_admin
from cadenza.infra.kafka.topics import TopicSpec, ensure_topics
from cadenza.pipelines import Pipeline
from cadenza.settings import KafkaSettings
from cadenza.worker import Worker
from cadenza.worker.context_stamps import SinkStamper
from cadenza.worker.executor import Executor

VARIANTS = ("unscheduled", "cameo", "no_sink_stamp", "bare_executor")
_STAMP = SinkStamper.__call__
_RUN_QUANTUM = Executor.run_quantum


def _bare_run_quantum(self: Executor, quantum: Any, schedule: Any) -> int:
    run = schedule.run
    ran = 0
    for _, unit in quantum:
        run(unit, unit.key, unit.value, unit.event_time, None)
        ran += 1
    return ran


def _no_stamp(self: SinkStamper, unit: Any, window: Any, value: object) -> None:
    return None


def _patch(variant: str) -> None:
    SinkStamper.__call__ = _no_stamp if variant == "no_sink_stamp" else _STAMP  # type: ignore[method-assign]
    Executor.run_quantum = _bare_run_quantum if variant == "bare_executor" else _RUN_QUANTUM  # type: ignore[method-assign]


def measure(settings: KafkaSettings, variant: str, records: int, repeat: int) -> list[float]:
    suffix = uuid.uuid4().hex[:8]
    source, sink = f"abl-in-{suffix}", f"abl-out-{suffix}"
    ensure_topics(make_admin(settings), [TopicSpec(source, PARTITIONS), TopicSpec(sink, PARTITIONS)])
    pipeline = Pipeline(f"abl-{suffix}", tenant="bench", latency_target="1s")
    pipeline.source(source, value=Event).filter(is_purchase).map(enrich).sink(sink)
    policy = "fifo" if variant == "unscheduled" else "cameo"
    worker = Worker([pipeline], settings, group=f"abl-{suffix}", policy=policy, max_buffered=records + 1)
    worker.start()
    output = worker._output
    assert output is not None
    per_record: list[float] = []
    try:
        for _ in range(repeat + 1):  # the first round warms up
            batch = messages(source, records)
            started = time.thread_time()
            if variant == "unscheduled":
                run_unscheduled(worker, batch)
            else:
                worker.admit(batch)
                worker.run_for(3600.0)
            output.flush()
            per_record.append((time.thread_time() - started) / records * 1e6)
    finally:
        worker.close()
    return per_record[1:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3, help="rounds of all variants, alternating")
    parser.add_argument("--repeat", type=int, default=3, help="measured batches per variant and round")
    args = parser.parse_args()
    results: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    with EmbeddedBroker() as broker:
        settings = KafkaSettings.load(bootstrap_servers=broker.bootstrap_servers)
        try:
            for _ in range(args.rounds):
                for variant in VARIANTS:
                    _patch(variant)
                    results[variant].extend(measure(settings, variant, args.records, args.repeat))
        finally:
            _patch("cameo")
    for variant, values in results.items():
        print(
            f"{variant:14s} median {statistics.median(values):6.2f} us/record  "
            f"min {min(values):6.2f}  ({len(values)} batches)"
        )


if __name__ == "__main__":
    main()
