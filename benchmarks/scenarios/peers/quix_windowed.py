"""quixstreams' side of the windowed workload (runs in the quixstreams venv): one Application.

The idiomatic quixstreams app: ``tumbling_window(1 s, grace = the workload's out-of-orderness)
.count().final()``, event time from the value's ``ts`` through the topic's timestamp extractor.
``closing_strategy="partition"``: a window closes when its partition's event time passes its end +
grace, as cadenza's watermark does; quixstreams' default (``"key"``) would close a key's windows
only when that key sends a later record, so the last windows of every key would wait for ever.
State is quixstreams' default (RocksDB with changelog topics, which it creates), as a user's would
be. Runs until SIGTERM or SIGINT (quixstreams stops gracefully on both).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from peers._app_args import parse_app_args
from peers.quix_throughput import make_app
from peers.windowed import MAX_OUT_OF_ORDERNESS_MS, WINDOW_MS


def event_time_ms(value: Any, _headers: Any, _timestamp: float, _timestamp_type: Any) -> int:
    return round(float(value["ts"]) * 1000)


def main() -> None:
    args = parse_app_args(__doc__.splitlines()[0] if __doc__ else "quixstreams app")
    app = make_app(args, stateful=True)
    source = app.topic(
        args.input, key_deserializer="str", value_deserializer="json", timestamp_extractor=event_time_ms
    )
    sink = app.topic(args.output, key_serializer="str", value_serializer="json")
    sdf = app.dataframe(source)
    sdf = (
        sdf.tumbling_window(duration_ms=WINDOW_MS, grace_ms=MAX_OUT_OF_ORDERNESS_MS)
        .count()
        .final(closing_strategy="partition")
    )
    sdf.to_topic(sink)
    app.run()


if __name__ == "__main__":
    main()
