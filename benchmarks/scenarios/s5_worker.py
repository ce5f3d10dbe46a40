"""One S5 worker process: ``s5_pipelines`` in a consumer group with a chosen partition assignor.

``cadenza worker`` has no option for librdkafka's ``partition.assignment.strategy`` (it uses
cooperative-sticky unless a join needs range), and S5 compares the eager rebalance against the
cooperative one, so the harness starts its workers through this script, which builds the same
:class:`~cadenza.worker.Worker` with the assignor as a consumer override. It logs at INFO with a
wall-clock timestamp per line (``<unix time> <logger> <level> <message>``): the harness reads the
worker's ``assigned`` / ``revoked`` / ``restored`` lines to tell when a migration is over.

    python benchmarks/scenarios/s5_worker.py --group G --assignment range|cooperative-sticky
        [--restore-slice S] [--worker-id W] [--ownership group|plan]
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cadenza.pipelines import load_pipelines
from cadenza.settings import KafkaSettings
from cadenza.worker import Worker
from cadenza.worker.config import WorkerConfig

LOG_FORMAT = "%(created).3f %(name)s %(levelname)s %(message)s"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--group", required=True)
    parser.add_argument("--assignment", required=True, choices=("range", "roundrobin", "cooperative-sticky"))
    parser.add_argument("--policy", default="cameo")
    parser.add_argument("--worker-id", default=None, help="the worker's name (in the ownership plan)")
    parser.add_argument("--ownership", default="group", choices=("group", "plan"))
    parser.add_argument("--restore-timeout", type=float, default=600.0)
    parser.add_argument(
        "--restore-slice", type=float, default=0.01, help="0: restore inside the assignment callback"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT, stream=sys.stdout)
    pipelines = load_pipelines(str(Path(__file__).resolve().parent / "s5_pipelines.py"))
    worker = Worker(
        pipelines,
        KafkaSettings.load(),
        WorkerConfig(
            group=args.group,
            restore_timeout=args.restore_timeout,
            restore_slice=args.restore_slice,
            consumer_overrides={"partition.assignment.strategy": args.assignment},
            worker_id=args.worker_id,
            ownership=args.ownership,
            policy=args.policy,
        ),
    )

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        worker.stop()  # commits what finished, hands queued records back, leaves the group

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    worker.run()


if __name__ == "__main__":
    main()
