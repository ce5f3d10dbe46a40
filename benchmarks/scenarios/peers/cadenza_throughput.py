"""cadenza's side of the throughput benchmark: one worker process, source -> map -> sink.

The source is declared without a model (``value=None``), so the worker hands the map the parsed JSON
dict, as the peers get theirs; the same :func:`peers.workload.transform` runs in every system. The
worker runs the scheduling policy the harness asked for, and the process says which on stderr (the
harness records it). Runs until SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path
from types import FrameType

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cadenza.pipelines import Pipeline
from cadenza.settings import KafkaSettings
from cadenza.worker import Worker
from cadenza.worker.config import WorkerConfig
from peers._app_args import parse_app_args
from peers.workload import transform


def run_worker(pipeline: Pipeline, args: argparse.Namespace) -> None:
    """Run ``pipeline`` in one worker as the harness asked (shared with ``cadenza_windowed.py``)."""
    settings = KafkaSettings.load(bootstrap_servers=args.bootstrap)
    print(f"cadenza worker policy={args.policy}", file=sys.stderr, flush=True)
    # No activity trace (a Python worker's default since 2026-12-06): the peers trace nothing either.
    config = WorkerConfig(group=args.group, policy=args.policy, activities_topic="off")
    worker = Worker([pipeline], settings, config)

    def stop(_signum: int, _frame: FrameType | None) -> None:
        worker.stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        worker.run()
    finally:
        print(waits_line(worker), file=sys.stderr, flush=True)


def waits_line(worker: Worker) -> str:
    """What the worker did besides running records, for the run's log: a slow repetition (CPU
    utilisation well under 1) is told apart by these (fetch rounds, commits and their time, pauses
    of a full buffer, waits for a full producer queue)."""
    counters = worker.counters
    output = worker._output
    full_waits = output.full_waits if output is not None else None
    return (
        f"cadenza worker counters: consumed={counters.consumed} batches={counters.batches} "
        f"commits={counters.commits} commit_ms={counters.commit_ms} pauses={counters.pauses} "
        f"peak_buffered={counters.peak_buffered} producer_full_waits={full_waits} "
        f"process_cpu_s={time.process_time():.2f}"
    )


def main() -> None:
    args = parse_app_args(__doc__.splitlines()[0] if __doc__ else "cadenza worker")
    pipeline = Pipeline("throughput", tenant="bench", latency_target="1s")
    pipeline.source(args.input).map(transform).sink(args.output)
    run_worker(pipeline, args)


if __name__ == "__main__":
    main()
