"""Micro-benchmark: where a restore's decoding time goes, and the longest piece of it in one go.

A background restore (``cadenza.worker.restoring``) reads a changelog in slices between runs of
records, so what matters for a live tenant is the longest stretch that cannot be sliced. This replays
one partition of ``--keys`` keys (one changelog batch, as a window's first checkpoint writes it) and
times the per-record ``apply`` calls (sliced: the reader stops between batches of records) and the
final ``entries()`` call (one piece), in seconds, best and median of the repeats.

    .venv/bin/python benchmarks/bench_changelog_replay.py --out results/ [--keys 250000]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from _common import environment, write_result

from cadenza.state import ChangelogReplay, ChangelogView, InMemoryStateStore, Position


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", type=Path, default=Path("results"))
    parser.add_argument("--keys", type=int, default=250_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    view = ChangelogView(InMemoryStateStore(), 0)
    for i in range(args.keys):
        view[(f"user-{i}", 86_400.0)] = {"count": i, "sum": i * 0.5}
    writes = view.drain(Position(offset=args.keys))
    applies: list[float] = []
    finals: list[float] = []
    for _ in range(args.repeat):
        replay = ChangelogReplay()
        started = time.perf_counter()
        for key, value in writes:
            replay.apply(key, value)
        applied = time.perf_counter()
        entries = replay.entries()
        finals.append(time.perf_counter() - applied)
        applies.append(applied - started)
        assert len(entries) == args.keys
    result = {
        "environment": environment(),
        "keys": args.keys,
        "apply_all_s": {"best": min(applies), "median": statistics.median(applies)},
        "entries_s": {"best": min(finals), "median": statistics.median(finals)},
    }
    print(f"{args.keys:,} keys: apply (sliced) {result['apply_all_s']}")
    print(f"{args.keys:,} keys: entries() (one piece) {result['entries_s']}")
    write_result(args.out, "changelog_replay.json", result)


if __name__ == "__main__":
    main()
