"""Keeping librdkafka's log lines readable while a broker is away.

librdkafka logs every failed reconnect of every client (``FAIL [cadenza#consumer-5] ...``): about a
line per client per second during an outage, which buries everything else a worker logs. The filter
below lets the first line of a kind through and then at most one per ``interval`` seconds, saying how
many it left out. A kind is librdkafka's facility (``FAIL``, ``SESSTMOUT``...) and the client's name,
which confluent-kafka passes as the first two arguments of each log call.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

__all__ = ["RepeatFilter"]


class RepeatFilter(logging.Filter):
    """Drops repeats of a log record's kind within ``interval`` seconds; the next one that passes
    carries the count of those dropped."""

    def __init__(self, interval: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.interval = interval
        self._clock = clock
        self._lock = threading.Lock()  # librdkafka logs from the thread that polls each client
        #: Per kind: when it last passed, and how many were dropped since.
        self._seen: dict[tuple[object, ...], tuple[float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        kind = (record.levelno, *args[:2]) if len(args) >= 2 else (record.levelno, record.msg)
        now = self._clock()
        with self._lock:
            seen = self._seen.get(kind)
            if seen is not None and now - seen[0] < self.interval:
                self._seen[kind] = (seen[0], seen[1] + 1)
                return False
            self._seen[kind] = (now, 0)
        if seen is not None and seen[1]:
            record.msg = f"{record.msg} (%d more like it in the last %.0f s not logged)"
            record.args = (*args, seen[1], now - seen[0])
        return True
