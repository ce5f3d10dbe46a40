"""How a long-running command learns it should stop: Ctrl-C and SIGTERM set one event.

SIGTERM matters as much as Ctrl-C: it is how a container is stopped, and as PID 1 a process that
installs no handler for it ignores it. Turning both into an event (rather than KeyboardInterrupt)
lets the command finish what it holds (flush, stop queries, close the broker) at a point of its
choosing; the previous handlers come back afterwards, so a second command in the same process
(the tests run several) starts from the usual state.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

__all__ = ["STOP_SIGNALS", "stop_on_signals"]

#: The signals that ask a command to stop: Ctrl-C at a terminal, SIGTERM from a container runtime.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def stop_on_signals() -> Iterator[threading.Event]:
    """An event set by the first Ctrl-C or SIGTERM while the block runs; the handlers in place before
    are restored when it ends, however it ends."""
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in STOP_SIGNALS}
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
