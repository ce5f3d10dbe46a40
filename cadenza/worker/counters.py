"""What a worker counts. Plain integer attributes, bumped by the single thread that runs records.

Counting is how bad input stays visible without per-record logging: a dead-lettered or late record
costs one increment here and one record in a topic, never a log line.
"""

from __future__ import annotations

__all__ = ["WorkerCounters"]


class WorkerCounters:
    __slots__ = (
        "batches",
        "commit_ms",
        "commits",
        "consumed",
        "dead_letter_decode",
        "dead_letter_function",
        "late",
        "pauses",
        "peak_buffered",
        "pipelines_stopped",
        "produced",
        "progress_records",
        "replay_skipped",
        "restored_keys",
        "restored_records",
        "units",
        "window_results",
    )

    def __init__(self) -> None:
        #: Records fetched from Kafka (every topic the worker reads).
        self.consumed = 0
        #: Units run: one per consumed record and pipeline reading its topic, minus the dead-lettered.
        self.units = 0
        #: Records produced to sink and repartition topics (not dead-letter, late or changelog).
        self.produced = 0
        #: Progress records written to repartition topics (watermark progress, not data; not in produced).
        self.progress_records = 0
        #: Values that failed to decode or validate, sent to a dead-letter topic.
        self.dead_letter_decode = 0
        #: Records a user function raised on, sent to a dead-letter topic.
        self.dead_letter_function = 0
        #: Late-topic records: one per (record, window it missed because the window had closed).
        self.late = 0
        #: Windows closed and emitted.
        self.window_results = 0
        #: Input records a stateful step skipped because its restored state already held them.
        self.replay_skipped = 0
        #: Changelog records read and keys restored when partitions were assigned.
        self.restored_records = 0
        self.restored_keys = 0
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

    def snapshot(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.__slots__}

    def __repr__(self) -> str:
        return f"WorkerCounters({self.snapshot()})"
