"""Keeps a worker process serving after a Kafka client failure that a worker cannot survive in place.

Some failures end a worker's clients for good: an idempotent producer whose broker came back without
its producer state fails fatally (``OUT_OF_ORDER_SEQUENCE_NUMBER``), a delivery times out during a
long outage, the group coordinator fences the consumer. The worker then stops at once, commits
nothing and leaves the group (see :meth:`Worker.run`), so everything not yet committed is still in
Kafka. What recovers from there is what a fresh process does: new clients, a new group member,
state rebuilt from the changelogs, records resumed from the committed offsets. The supervisor does
exactly that in-process, with a bounded number of restarts and an exponential back-off, so one
outage does not take a worker's tenants down, and a failure that keeps recurring still ends the
process (with a non-zero exit for the container's own restart policy).

Failures before the first group join (a wrong address, a topic of the wrong shape, a bad setting)
are not retried: they are the user's to fix, and the command should say so at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from confluent_kafka import KafkaException

from cadenza.infra.kafka.clients import as_client_error
from cadenza.infra.kafka.errors import KafkaClientError, TopicError
from cadenza.infra.metrics import names
from cadenza.worker.runtime import Worker

__all__ = ["WorkerSupervisor"]

_log = logging.getLogger("cadenza.worker")


class WorkerSupervisor:
    """Runs ``make_worker()``'s worker until stopped; after a Kafka client failure, a fresh one.

    ``max_restarts`` within ``restart_window`` seconds are allowed; the next failure propagates.
    The wait before a restart starts at ``backoff`` seconds and doubles per recent restart, up to
    ``max_backoff``. ``on_worker`` is called with each new worker before it runs (the CLI binds its
    metrics endpoint there).
    """

    def __init__(
        self,
        make_worker: Callable[[], Worker],
        *,
        max_restarts: int = 5,
        restart_window: float = 600.0,
        backoff: float = 1.0,
        max_backoff: float = 30.0,
        on_worker: Callable[[Worker], None] | None = None,
    ) -> None:
        if max_restarts < 0 or restart_window <= 0 or backoff < 0 or max_backoff < backoff:
            raise ValueError("restart limits must be non-negative and max_backoff at least backoff")
        self._make_worker = make_worker
        self.max_restarts = max_restarts
        self.restart_window = restart_window
        self.backoff = backoff
        self.max_backoff = max_backoff
        self._on_worker = on_worker
        self._stop = threading.Event()
        self._recent: list[float] = []
        #: Restarts so far (exported as ``cadenza_worker_restarts_total``).
        self.restarts = 0
        #: The worker running now (or last).
        self.worker: Worker | None = None
        #: Whether any worker of this process has joined its group: until then a failure is the user's
        #: to fix (a wrong address or setting); after it, also a restarted worker that could not join
        #: yet (the broker still away) is restarted again.
        self._joined_once = False

    def stop(self) -> None:
        """Stop the running worker and do not start another; safe from any thread or signal handler."""
        self._stop.set()
        worker = self.worker
        if worker is not None:
            worker.stop()

    def run(self, first: Worker | None = None) -> Worker:
        """Run workers until :meth:`stop`; return the last one (for its counters).

        ``first``: a worker already made (and perhaps started) by the caller, run before any new one;
        ``on_worker`` is called only for the workers the supervisor makes.
        """
        worker = first
        while True:
            if worker is None:
                worker = self._make_worker()
            self.worker = worker
            worker.exporter.register_callback(names.WORKER_RESTARTS, lambda: self.restarts)
            if self._on_worker is not None and worker is not first:
                self._on_worker(worker)
            if self._stop.is_set():
                worker.stop()
            try:
                worker.run()
                return worker
            except (KafkaClientError, KafkaException, SystemError) as caught:
                # A raw KafkaException (a fatal producer error raised by a client call the worker
                # did not wrap) is the same failure of a Kafka client: restart on it too.
                exc = (
                    caught if isinstance(caught, KafkaClientError) else as_client_error(caught, "the worker")
                )
                if exc is None or not self._should_restart(worker, exc):
                    raise
                delay = self._note_restart()
                _log.error(
                    "worker failed: %s; starting it again in %.1f s from the last committed offsets "
                    "(restart %d; at most %d within %.0f s)",
                    exc,
                    delay,
                    self.restarts,
                    self.max_restarts,
                    self.restart_window,
                )
                if self._stop.wait(delay):
                    return worker
                worker = None

    def _should_restart(self, worker: Worker, exc: KafkaClientError) -> bool:
        self._joined_once = self._joined_once or worker.joined
        if self._stop.is_set() or isinstance(exc, TopicError) or not self._joined_once:
            return False
        now = time.monotonic()
        self._recent = [t for t in self._recent if now - t < self.restart_window]
        if len(self._recent) >= self.max_restarts:
            _log.error(
                "worker failed %d times within %.0f s; giving up: %s",
                len(self._recent) + 1,
                self.restart_window,
                exc,
            )
            return False
        return True

    def _note_restart(self) -> float:
        self._recent.append(time.monotonic())
        self.restarts += 1
        return float(min(self.max_backoff, self.backoff * 2 ** (len(self._recent) - 1)))
