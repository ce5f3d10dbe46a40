"""When a worker starts again after a Kafka client failure that it cannot survive in place.

Some failures end a worker's clients for good: an idempotent producer whose broker came back without
its producer state fails fatally (``OUT_OF_ORDER_SEQUENCE_NUMBER``), a delivery times out during a
long outage, the group coordinator fences the consumer. The worker then stops at once, commits
nothing and leaves the group, so everything not yet committed is still in Kafka. What recovers from
there is what a fresh process does: new clients, a new group member, state rebuilt from the
changelogs, records resumed from the committed offsets. :meth:`cadenza.worker.Worker.run` does
exactly that in-process, as these rules allow: a bounded number of restarts with an exponential
back-off, so one outage does not take a worker's tenants down, and a failure that keeps recurring
still ends the process (with a non-zero exit for the container's own restart policy).

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

__all__ = ["RestartBudget", "restartable"]

_log = logging.getLogger("cadenza.worker")


def restartable(caught: BaseException) -> KafkaClientError | None:
    """The Kafka client failure ``caught`` is, if it is one: cadenza's own, or a raw
    ``KafkaException`` (a fatal producer error raised by a client call the worker did not wrap), or
    the ``SystemError`` a delivery callback turns one into."""
    if isinstance(caught, KafkaClientError):
        return caught
    if isinstance(caught, (KafkaException, SystemError)):
        return as_client_error(caught, "the worker")
    return None


class RestartBudget:
    """``max_restarts`` within ``window`` seconds are allowed; the wait before a restart starts at
    ``backoff`` seconds and doubles per recent restart, up to ``max_backoff``."""

    def __init__(
        self,
        max_restarts: int,
        *,
        window: float = 600.0,
        backoff: float = 1.0,
        max_backoff: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_restarts < 0 or window <= 0 or backoff < 0 or max_backoff < backoff:
            raise ValueError("restart limits must be non-negative and max_backoff at least backoff")
        self.max_restarts = max_restarts
        self.window = window
        self.backoff = backoff
        self.max_backoff = max_backoff
        self._clock = clock
        self._recent: list[float] = []
        #: Restarts so far (exported as ``cadenza_worker_restarts_total``).
        self.restarts = 0
        #: Whether the worker joined its group once: until then a failure is the user's to fix (a
        #: wrong address or setting); after it, also a restart that could not join yet (the broker
        #: still away) is restarted again.
        self.joined_once = False

    def allows(self, exc: KafkaClientError, *, joined: bool, stopping: bool) -> bool:
        """Whether a failure ``exc`` of a worker that ``joined`` (or not) its group starts it again."""
        self.joined_once = self.joined_once or joined
        if stopping or isinstance(exc, TopicError) or not self.joined_once:
            return False
        now = self._clock()
        self._recent = [t for t in self._recent if now - t < self.window]
        if len(self._recent) >= self.max_restarts:
            _log.error(
                "worker failed %d times within %.0f s; giving up: %s", len(self._recent) + 1, self.window, exc
            )
            return False
        return True

    def note(self) -> float:
        """Count a restart; returns the seconds to wait before it."""
        self._recent.append(self._clock())
        self.restarts += 1
        return float(min(self.max_backoff, self.backoff * 2 ** (len(self._recent) - 1)))

    def run(
        self,
        incarnation: Callable[[], None],
        stop: threading.Event,
        *,
        joined: Callable[[], bool],
        afresh: Callable[[], None],
    ) -> None:
        """Run ``incarnation`` until it returns; after a failure these rules allow, wait the back-off
        (cut short by ``stop``), call ``afresh`` and run it again. Other failures propagate."""
        while True:
            try:
                incarnation()
                return
            except BaseException as caught:
                exc = restartable(caught)
                if exc is None or not self.allows(exc, joined=joined(), stopping=stop.is_set()):
                    raise
            delay = self.note()
            _log.error(
                "worker failed: %s; starting it again in %.1f s from the last committed offsets "
                "(restart %d; at most %d within %.0f s)",
                exc,
                delay,
                self.restarts,
                self.max_restarts,
                self.window,
            )
            if stop.wait(delay):
                return
            afresh()
