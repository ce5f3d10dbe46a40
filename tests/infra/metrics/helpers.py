"""An in-memory span sink, so the emitter's batching can be tested exactly and without a broker.

The Kafka sink is exercised against the real broker in ``test_spans_kafka.py``; this one only stands
in for the transport where the test is about what the emitter hands over, and when.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class ListSink:
    """Keeps every (key, value) it is sent; ``refuse`` makes ``send`` say its queue is full."""

    def __init__(self, refuse: bool = False) -> None:
        self.records: list[tuple[bytes, bytes]] = []
        self.batches: list[int] = []  # records sent between two polls: the emitter's batch sizes
        self.refuse = refuse
        self.closed = False
        self._since_poll = 0
        self._lock = threading.Lock()

    def send(self, key: bytes, value: bytes) -> bool:
        if self.refuse:
            return False
        with self._lock:
            self.records.append((key, value))
            self._since_poll += 1
        return True

    def poll(self) -> None:
        with self._lock:
            if self._since_poll:
                self.batches.append(self._since_poll)
                self._since_poll = 0

    def flush(self, timeout: float) -> int:
        self.poll()
        return 0

    def close(self, timeout: float) -> None:
        self.flush(timeout)
        self.closed = True

    @property
    def delivered(self) -> int:
        return len(self.records)

    @property
    def failed(self) -> int:
        return 0


def wait_until(condition: Callable[[], bool], timeout: float) -> bool:
    """Poll ``condition`` until it holds or ``timeout`` seconds pass; every test wait is bounded."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.005)
    return condition()
