"""S1 in faust-streaming (runs in the faust venv): tenants LS and BA in one faust worker process.

- **LS**: JSON ``{"user", "page", "ts"}`` -> drop ``page == "/health"`` -> ``group_by(user)`` (faust's
  repartition through a topic, as cadenza's ``key_by``) -> a tumbling-window table counting per user,
  1 s windows on event time ``ts`` (``relative_to_field(Visit.ts)``) -> on window close, one JSON record
  ``{"key", "window_start", "window_end", "value"}`` (key = user) to the LS output topic.
- **BA**: JSON ``{"id", "payload", "ts"}`` -> ``peers.cpu_work.burn(payload, cpu_iterations)`` ->
  JSON ``{"id", "ts", "score"}`` to the BA output topic.

Both agents share one event loop: a record is handled when its turn comes in arrival order, and BA's
CPU work blocks LS while it runs. That is faust's model, the first-come-first-served peer of S1.

**How faust closes a window** (faust-streaming 0.15.3, ``faust/tables/base.py``). A windowed table has
no watermark. Every ``table_cleanup_interval`` seconds (default 30 s) a background timer
(``Collection._clean_data`` -> ``_del_old_keys``) walks, per partition, a heap of window end times and
closes every window whose end is "stale" against the **wall clock**: for a tumbling window of size S
with ``expires=E``, window ``[s, s+S)`` closes at the first cleanup tick after ``time.time()`` passes
``s + S + E`` (faust stores the end as ``s + S - 0.1`` and compares window starts, which comes to the
same). Closing pops the window's value from the table and calls ``on_window_close(key, value)``; that
callback is where this app sends the LS record. Consequences:

- promptness: a window is emitted between ``E`` and ``E + table_cleanup_interval`` after its end; this
  app sets the interval to 0.05 s and ``E`` to 0.01 s by default (``E`` must be non-zero: faust treats
  ``expires=0`` as "never expire"), the most prompt faust allows without busy-looping;
- a record processed after wall-clock time passed its window's end + E (a backlog under a burst, or a
  late event) finds its window already closed: faust opens the window again and closes it at the
  next tick, but only emits a window whose start is later than every window it closed before;
- that last rule is table-wide in faust 0.15.3 (``Collection.last_closed_window``), not per partition:
  once partition 0 has closed window ``s``, the same window of partitions 1..n (other users) is dropped
  without being emitted. This app keeps faust's rule but per key (each user lives in one partition), by
  neutralising ``last_closed_window`` in a Table subclass and skipping a second close of a
  ``(user, window)`` it already emitted; so every user gets exactly one record per window, and a record
  that arrives after its window was emitted is dropped (counted in the ``late dropped`` log line).

faust hard-codes ``fetch_max_wait_ms=1500`` for its consumers; on a broker that holds an empty fetch
for the whole wait (the embedded Tansu broker does) that adds up to 1.5 s per hop, so this app sets it
to ``--fetch-max-wait-ms`` (default 500, what cadenza's worker consumer uses).

Parameters come from the command line, or from ``FAUST_S1_*`` environment variables of the same names
(e.g. ``FAUST_S1_BOOTSTRAP``, ``FAUST_S1_CPU_ITERATIONS``). Runs until SIGTERM or SIGINT.

    python benchmarks/scenarios/peers/faust_s1.py --bootstrap H:P --ls-input A --ls-output B \\
        --ba-input C --ba-output D --cpu-iterations 300
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import faust  # type: ignore[import-not-found]

from peers.cpu_work import burn, burn_cpu

WINDOW_S = 1.0
_log = logging.getLogger("faust_s1")


def _env(name: str, default: str | None = None) -> str | None:
    return os.environ.get(f"FAUST_S1_{name.upper().replace('-', '_')}", default)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])

    def add(name: str, *, default: str | None = None, kind: type = str, help: str) -> None:
        value = _env(name, default)
        parser.add_argument(f"--{name}", type=kind, default=value, required=value is None, help=help)

    add("bootstrap", help="host:port of the broker")
    add("ls-input", help="LS input topic")
    add("ls-output", help="LS output topic (one record per user per closed window)")
    add("ba-input", help="BA input topic")
    add("ba-output", help="BA output topic")
    add("cpu-iterations", kind=int, help="iterations of peers.cpu_work.burn per BA record")
    add(
        "cpu-seconds",
        default="0",
        kind=float,
        help="seconds of CPU per BA record (peers.cpu_work.burn_cpu) instead of iterations, if > 0",
    )
    add("app-id", default="cadenza-s1-faust", help="faust app id (also its consumer group)")
    add("partitions", default="4", kind=int, help="partitions of topics faust creates")
    add("workdir", default=".", help="faust's data directory lives here")
    add("cleanup-interval", default="0.05", kind=float, help="seconds between faust's window-close checks")
    add("window-expires", default="0.01", kind=float, help="seconds after a window's end before it closes")
    add(
        "fetch-max-wait-ms",
        default="500",
        kind=int,
        help="aiokafka fetch_max_wait_ms (faust hard-codes 1500)",
    )
    return parser.parse_args(argv)


class PerKeyCloseTable(faust.Table):  # type: ignore[misc]
    """faust's Table without the table-wide ``last_closed_window`` rule (see the module docstring)."""

    @property
    def last_closed_window(self) -> float:
        return float("-inf")

    @last_closed_window.setter
    def last_closed_window(self, value: float) -> None:
        pass  # faust assigns it after every close; the per-key rule lives in the close callback


def patch_fetch_wait(fetch_max_wait_ms: int) -> None:
    """Make faust's consumers use ``fetch_max_wait_ms`` instead of the 1500 ms faust hard-codes.

    Against a broker that holds an empty fetch for the whole wait even when records arrive meanwhile
    (the embedded Tansu broker does), every hop of a quiet pipeline would add up to 1.5 s; 500 ms is
    what cadenza's worker consumer uses (librdkafka's default), so both pay the same.
    """
    import aiokafka  # noqa: PLC0415 - faust's dependency

    base = aiokafka.AIOKafkaConsumer

    class Consumer(base):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs["fetch_max_wait_ms"] = fetch_max_wait_ms
            super().__init__(*args, **kwargs)

    aiokafka.AIOKafkaConsumer = Consumer


def build_app(args: argparse.Namespace) -> Any:
    if args.window_expires <= 0:
        raise SystemExit("--window-expires must be > 0 (faust treats 0 as: windows never close)")
    patch_fetch_wait(args.fetch_max_wait_ms)
    app = faust.App(
        args.app_id,
        broker=f"kafka://{args.bootstrap}",
        datadir=str(Path(args.workdir) / "faust-data"),
        web_enabled=False,
        consumer_auto_offset_reset="earliest",
        broker_session_timeout=6.0,
        broker_heartbeat_interval=1.0,
        topic_partitions=args.partitions,
        topic_disable_leader=True,
        table_cleanup_interval=args.cleanup_interval,
        Table=PerKeyCloseTable,
    )

    class Visit(faust.Record, serializer="json"):  # type: ignore[misc, call-arg]
        user: str
        page: str
        ts: float

    ls_in = app.topic(args.ls_input, value_type=Visit)
    ls_out = app.topic(
        args.ls_output, key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw"
    )
    ba_in = app.topic(args.ba_input, value_type=bytes, value_serializer="raw")
    ba_out = app.topic(
        args.ba_output, key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw"
    )
    emitted: dict[tuple[str, float], None] = {}  # insertion-ordered, pruned below
    late = {"dropped": 0}

    async def on_close(key: tuple[str, tuple[float, float]], value: int | None) -> None:
        user, (start, _end) = key
        if value is None:  # faust found the key in its expiry index but no value left: nothing to emit
            return
        if (user, start) in emitted:
            late["dropped"] += int(value)
            _log.warning(
                "late dropped: %d record(s) of %s window %s (total %d)", value, user, start, late["dropped"]
            )
            return
        emitted[(user, start)] = None
        while len(emitted) > 1_000_000:  # bound memory on long runs; old windows first
            del emitted[next(iter(emitted))]
        record = {"key": user, "window_start": start, "window_end": start + WINDOW_S, "value": int(value)}
        await ls_out.send(key=user.encode(), value=json.dumps(record).encode())

    counts = (
        app.Table("ls-counts", default=int, partitions=args.partitions, on_window_close=on_close)
        .tumbling(WINDOW_S, expires=args.window_expires)
        .relative_to_field(Visit.ts)
    )

    async def ls(stream: AsyncIterator[Any]) -> None:
        keyed = stream.filter(lambda visit: visit.page != "/health").group_by(Visit.user)  # type: ignore[attr-defined]
        async for visit in keyed:
            counts[visit.user] += 1

    async def ba(stream: AsyncIterator[Any]) -> None:
        async for key, value in stream.items():  # type: ignore[attr-defined]
            record = json.loads(value)
            if args.cpu_seconds > 0:
                score = burn_cpu(record["payload"], args.cpu_seconds)
            else:
                score = burn(record["payload"], args.cpu_iterations)
            out = {"id": record["id"], "ts": record["ts"], "score": score}
            await ba_out.send(key=key, value=json.dumps(out).encode())

    app.agent(ls_in, name="ls")(ls)
    app.agent(ba_in, name="ba")(ba)
    return app


def main() -> None:
    args = parse_args()
    app = build_app(args)
    sys.argv = [sys.argv[0], "worker", "-l", "warn"]
    app.main()


if __name__ == "__main__":
    main()
