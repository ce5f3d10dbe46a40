"""quixstreams' side of the throughput benchmark (runs in the quixstreams venv): one Application.

The idiomatic quixstreams app: a StreamingDataFrame ``apply`` of the shared
:func:`peers.workload.transform`, then ``to_topic``. quixstreams' own JSON (de)serializers are used,
since they are part of what a user of quixstreams gets. Defaults otherwise (at-least-once, idempotent
producer), except a short session timeout so the group join on the embedded broker is quick (it takes
about half the session timeout there; the join is not timed either way) and no changelog topics (the
app is stateless). Runs until SIGTERM or SIGINT (quixstreams stops gracefully on both).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from quixstreams import Application  # type: ignore[import-not-found]

from peers._app_args import parse_app_args
from peers.workload import transform


def make_app(args: argparse.Namespace, *, stateful: bool = False) -> Application:
    """The Application as the harness asked; ``stateful`` (``quix_windowed.py``): quixstreams' defaults
    for state, changelog topics it creates itself."""
    return Application(
        broker_address=args.bootstrap,
        consumer_group=args.group,
        auto_offset_reset="earliest",
        state_dir=str(Path(args.workdir) / "quix-state"),
        use_changelog_topics=stateful,
        auto_create_topics=stateful,
        loglevel="WARNING",
        consumer_extra_config={"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000},
    )


def main() -> None:
    args = parse_app_args(__doc__.splitlines()[0] if __doc__ else "quixstreams app")
    app = make_app(args)
    source = app.topic(args.input, key_deserializer="bytes", value_deserializer="json")
    sink = app.topic(args.output, key_serializer="bytes", value_serializer="json")
    sdf = app.dataframe(source)
    sdf = sdf.apply(transform)
    sdf.to_topic(sink)
    app.run()


if __name__ == "__main__":
    main()
