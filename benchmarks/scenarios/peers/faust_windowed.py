"""faust-streaming's side of the windowed workload (runs in the faust venv): one worker process.

faust's windowed table is the idiomatic tool: ``Table(...).tumbling(1 s).relative_to_stream()``,
keyed by the record key, in event time (the Kafka record timestamp, which the harness sets to ``ts``).
faust cannot emit a *final* result per window in event time: its windows close (``on_window_close``)
against the **wall clock** at cleanup ticks, and faust 0.15.3 drops the close of a window in every
partition but the first (``Collection.last_closed_window`` is table-wide; see ``faust_s1.py``). So
this app emits what faust can emit in event time: an **update** per input record, the window's count so far
(``{"start", "end", "value"}``, ms, like quixstreams), and the harness takes the largest count per
(key, window) as faust's result. That costs faust one output record per input record (the others emit
one per window), which is its semantics, not a handicap added here. No ``expires``: expiry is
wall-clock based and would drop the windows of this pre-produced (past) input while they count.
The table keeps its changelog topic, as a user's would. Runs until SIGTERM or SIGINT.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from peers._app_args import parse_app_args
from peers.faust_throughput import make_app, run
from peers.windowed import WINDOW_MS


def main() -> None:
    args = parse_app_args(__doc__.splitlines()[0] if __doc__ else "faust app")
    app, source, sink = make_app(args)
    size_s = WINDOW_MS / 1000
    table = app.Table("windowed-counts", default=int, partitions=4, key_type=str)
    counts = table.tumbling(size_s).relative_to_stream()

    async def process(stream: AsyncIterator[Any]) -> None:
        async for event in stream.events():  # type: ignore[attr-defined]
            user = event.key.decode()
            counts[user] += 1
            start, _ = table.window.ranges(event.message.timestamp)[0]
            start_ms = round(start * 1000)
            value = {"start": start_ms, "end": start_ms + WINDOW_MS, "value": counts[user].current()}
            await sink.send(key=event.key, value=json.dumps(value).encode())

    app.agent(source, name="windowed")(process)
    run(app)


if __name__ == "__main__":
    main()
