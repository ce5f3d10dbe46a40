"""What a worker counts. Plain integer attributes, bumped by the single thread that runs records.

Counting is how bad input stays visible without per-record logging: a dead-lettered or late record
costs one increment and one record in a topic, never a log line.

Records produced, dead letters and late records are counted once, in the Prometheus series of the
step they happened at (:class:`~cadenza.infra.metrics.prometheus.OperatorMetrics`, which
``/metrics`` reads at scrape time); the worker-wide totals here are sums over those series, made
when read. So the executor thread bumps one integer per such record, and the two views cannot
disagree.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cadenza.infra.metrics.prometheus import OperatorMetrics

__all__ = ["WorkerCounters"]


class WorkerCounters:
    __slots__ = (
        "_series",
        "batches",
        "commit_ms",
        "commits",
        "consumed",
        "pauses",
        "peak_buffered",
        "pipelines_stopped",
        "progress_records",
        "replay_skipped",
        "restored_keys",
        "restored_records",
        "units",
        "warm_installs",
        "window_results",
    )

    def __init__(self) -> None:
        #: Records fetched from Kafka (every topic the worker reads).
        self.consumed = 0
        #: Units run: one per consumed record and pipeline reading its topic, minus the dead-lettered.
        self.units = 0
        #: Progress records written to repartition topics (watermark progress, not data; not in produced).
        self.progress_records = 0
        #: The series records produced, dead letters and late records are counted in, by identity
        #: (see the module docstring); a plan built again after a rebalance registers the same series
        #: again.
        self._series: dict[int, OperatorMetrics] = {}
        #: Windows closed and emitted.
        self.window_results = 0
        #: Input records a stateful step skipped because its restored state already held them.
        self.replay_skipped = 0
        #: Changelog records read and keys restored when partitions were assigned.
        self.restored_records = 0
        self.restored_keys = 0
        #: Partitions taken over by a plan move from a warm copy (their keys count in restored_keys,
        #: their changelog records in neither: the copy was read before the hand-over).
        self.warm_installs = 0
        #: Fetch rounds (each followed by running queued records for up to a slice of time).
        self.batches = 0
        self.commits = 0
        #: Milliseconds the executor spent committing (flushing outputs and changelogs, then offsets):
        #: time in which no record runs.
        self.commit_ms = 0
        #: Times the fetcher paused its partitions because the scheduler's buffer was full.
        self.pauses = 0
        #: The most units the scheduler held at once (the buffer bound is what keeps this in check).
        self.peak_buffered = 0
        #: Pipelines stopped by a failed step (``on_error="stop"``).
        self.pipelines_stopped = 0

    def count_in(self, series: OperatorMetrics) -> None:
        """Include ``series``' records produced, dead letters and late records in the totals below."""
        self._series.setdefault(id(series), series)

    @property
    def produced(self) -> int:
        """Records produced to sink and repartition topics (not dead-letter, late or changelog)."""
        return sum(series.produced for series in list(self._series.values()))

    @property
    def dead_letter_decode(self) -> int:
        """Values that failed to decode or validate, sent to a dead-letter topic."""
        return self._dead_lettered("decode")

    @property
    def dead_letter_function(self) -> int:
        """Records a user function raised on, sent to a dead-letter topic."""
        return self._dead_lettered("function")

    @property
    def late(self) -> int:
        """Late-topic records: one per (record, window it missed because the window had closed)."""
        return sum(series.late for series in list(self._series.values()))

    def _dead_lettered(self, reason: str) -> int:
        return sum(series.dead_lettered.get(reason, 0) for series in list(self._series.values()))

    def snapshot(self) -> dict[str, int]:
        names = [name for name in self.__slots__ if not name.startswith("_")]
        names += ["dead_letter_decode", "dead_letter_function", "late", "produced"]
        return {name: getattr(self, name) for name in sorted(names)}

    def __repr__(self) -> str:
        return f"WorkerCounters({self.snapshot()})"
