"""cadenza's side of the windowed workload: one worker, keyed source -> 1 s tumbling count -> sink.

The source is keyed by the Kafka record key (``key=str``: the harness partitioned the input by it, so
no repartition is needed, as in the peers) and takes event time from the value's ``ts`` field, with
the workload's ``max_out_of_orderness``; the window emits one final result per key and window when
the partition's watermark passes its end. Window state lives in the worker's default store, with
its changelog topic, as a user's would; the pipeline is named after the run's consumer group, so each
run starts from empty state, as the peers' (whose state topics are named after their group) do. Runs
until SIGTERM or SIGINT.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cadenza.pipelines import Pipeline, Tumbling
from peers._app_args import parse_app_args
from peers.cadenza_throughput import run_worker
from peers.windowed import MAX_OUT_OF_ORDERNESS_MS, WINDOW_MS


def main() -> None:
    args = parse_app_args(__doc__.splitlines()[0] if __doc__ else "cadenza worker")
    # Named after the run's fresh group: window state (and its changelog topic) belongs to the pipeline
    # name, so a second run under one name would restore the first run's state and skip the input.
    pipeline = Pipeline(args.group, tenant="bench", latency_target="1s")
    (
        pipeline.source(
            args.input, key=str, timestamp="ts", max_out_of_orderness=f"{MAX_OUT_OF_ORDERNESS_MS}ms"
        )
        .window(Tumbling(f"{WINDOW_MS}ms"))
        .count()
        .sink(args.output)
    )
    run_worker(pipeline, args)


if __name__ == "__main__":
    main()
