"""faust-streaming's side of the throughput benchmark (runs in the faust venv): one worker process.

The idiomatic faust app: an agent iterating its stream one record at a time and sending each result
to the output topic (``await topic.send`` buffers in aiokafka's producer, it does not wait for the
acknowledgement). Raw bytes in and out, so faust's codecs add nothing and the parse/map/serialize is
the shared :func:`peers.workload.transform` with the standard ``json`` module, as everywhere else.
A short session timeout keeps the group join short on the embedded broker (its join takes about half
the session timeout); the join is not timed either way. Runs until SIGTERM or SIGINT (faust's own
handlers stop the worker).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import faust  # type: ignore[import-not-found]

from peers._app_args import parse_app_args
from peers.workload import transform


def make_app(args: argparse.Namespace) -> tuple[Any, Any, Any]:
    """The app and its raw-bytes source and sink topics (shared with ``faust_windowed.py``)."""
    app = faust.App(
        args.group,
        broker=f"kafka://{args.bootstrap}",
        datadir=str(Path(args.workdir) / "faust-data"),
        web_enabled=False,
        consumer_auto_offset_reset="earliest",
        broker_session_timeout=6.0,
        broker_heartbeat_interval=1.0,
        topic_partitions=4,
        topic_disable_leader=True,
    )
    source = app.topic(
        args.input, key_type=bytes, value_type=bytes, value_serializer="raw", key_serializer="raw"
    )
    sink = app.topic(
        args.output, key_type=bytes, value_type=bytes, value_serializer="raw", key_serializer="raw"
    )
    return app, source, sink


def run(app: Any) -> None:
    """Run ``app``'s worker as faust's command line would, at faust's quiet log level."""
    sys.argv = [sys.argv[0], "worker", "-l", "warn"]
    app.main()


def main() -> None:
    args = parse_app_args(__doc__.splitlines()[0] if __doc__ else "faust app")
    app, source, sink = make_app(args)

    async def process(stream: AsyncIterator[Any]) -> None:
        async for key, value in stream.items():  # type: ignore[attr-defined]
            await sink.send(key=key, value=json.dumps(transform(json.loads(value))).encode())

    app.agent(source, name="throughput")(process)
    run(app)


if __name__ == "__main__":
    main()
