"""The two kinds of lessee: a thread (blocking I/O) and a process (CPU-bound Python, past the GIL).

Both take one batch at a time and put what they have to say into the hub's result queue as
``(lessee, message)``: a batch's ``(token, outcomes, seconds)``, :data:`READY` once it can take work,
:data:`DIED` when it is gone. The lessor never waits on a lessee: it sends a batch only to a ready,
idle lessee (so a pipe's buffer holds at most one batch) and drains the queue between quanta.

A thread lessee runs whatever function a batch names (it shares the lessor's memory). A process
lessee is started with ``spawn`` (forking a process that holds librdkafka's threads is unsafe), waits
warm until a step leases it, and is then *bound*: the step's function is pickled to it once, not with
every batch. A process that takes too long over one call is killed and replaced; a thread cannot be
killed, so it is abandoned (it exits when its call returns, and what it returns is dropped).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import pickle
import signal
import threading
from collections.abc import Callable, MutableSequence
from multiprocessing.connection import Connection
from queue import SimpleQueue
from typing import Any, Final

from cadenza.worker.engine.lessees.calls import Outcome, run_batch

__all__ = ["DIED", "READY", "Lessee", "ProcessLessee", "RemoteError", "ThreadLessee"]

READY: Final = "ready"
DIED: Final = "died"

Message = tuple[int, list[Outcome], float] | str
Results = SimpleQueue[tuple["Lessee", Message]]

_SPAWN = multiprocessing.get_context("spawn")


class RemoteError(Exception):
    """A call's exception that could not be pickled back from its process lessee; it keeps the
    original class name as the dead letter's ``cadenza-error-type``."""

    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(message)
        self.error_type = error_type


def _current(progress: MutableSequence[float]) -> tuple[int, float] | None:
    started = progress[1]
    index = progress[0]
    if started <= 0.0 or progress[1] != started:
        return None
    return int(index), started


class Lessee:
    """What the lessor keeps of a lessee: who holds its lease, what it runs, since when it idles."""

    __slots__ = (
        "batch",
        "ident",
        "idle_since",
        "leased_at",
        "progress",
        "ready",
        "results",
        "retired",
        "step",
    )

    kind = "thread"

    def __init__(self, ident: int, results: Results, progress: MutableSequence[float]) -> None:
        self.ident = ident
        self.results = results
        self.progress = progress
        self.ready = False
        #: The in-flight batch's token, or ``None`` while idle.
        self.batch: int | None = None
        #: The step holding the lease (``None``: warm, in the pool); typed loosely to stay below it.
        self.step: Any = None
        self.leased_at = 0.0
        self.idle_since = 0.0
        #: Killed, abandoned or stopped: whatever it still says is dropped.
        self.retired = False

    def current(self) -> tuple[int, float] | None:
        """``(index in the batch, monotonic start)`` of the call running, or ``None``."""
        return _current(self.progress)

    def start(self) -> None:
        raise NotImplementedError

    def send(self, token: int, kind: int, fn: Callable[[Any], Any], values: list[Any]) -> None:
        raise NotImplementedError

    def bind(self, kind: int, fn_bytes: bytes) -> None:
        """Give a process lessee its step's function (a thread takes it with each batch)."""

    def stop(self) -> None:
        """Let it finish what it runs and end (a release beyond the warm pool, a worker's close)."""
        raise NotImplementedError

    def kill(self) -> None:
        """End it now: a call past its timeout. A thread cannot be ended; it is abandoned."""
        raise NotImplementedError


class ThreadLessee(Lessee):
    """A daemon thread taking batches from its own inbox."""

    __slots__ = ("inbox", "thread")

    kind = "thread"

    def __init__(self, ident: int, results: Results) -> None:
        super().__init__(ident, results, [0.0, 0.0])
        self.inbox: SimpleQueue[tuple[int, int, Callable[[Any], Any], list[Any]] | None] = SimpleQueue()
        self.thread = threading.Thread(target=self._serve, name=f"cadenza-lessee-{ident}", daemon=True)
        self.ready = True

    def start(self) -> None:
        self.thread.start()

    def send(self, token: int, kind: int, fn: Callable[[Any], Any], values: list[Any]) -> None:
        self.inbox.put((token, kind, fn, values))

    def _serve(self) -> None:
        inbox, results, progress = self.inbox, self.results, self.progress
        while (job := inbox.get()) is not None:
            token, kind, fn, values = job
            outcomes, seconds = run_batch(kind, fn, values, progress)
            results.put((self, (token, outcomes, seconds)))

    def stop(self) -> None:
        self.retired = True
        self.inbox.put(None)

    def kill(self) -> None:
        self.stop()  # it ends when (if ever) its call returns


class ProcessLessee(Lessee):
    """A spawned process serving one bound function, with a reader thread on the lessor's side."""

    __slots__ = ("_child", "conn", "process", "reader")

    kind = "process"

    def __init__(self, ident: int, results: Results) -> None:
        progress = _SPAWN.RawArray("d", 2)
        super().__init__(ident, results, progress)
        self.conn, child = _SPAWN.Pipe()
        self.process = _SPAWN.Process(
            target=serve, args=(child, progress), name=f"cadenza-lessee-{ident}", daemon=True
        )
        self._child = child
        self.reader = threading.Thread(target=self._read, name=f"cadenza-lessee-{ident}-reader", daemon=True)

    def start(self) -> None:
        self.process.start()
        self._child.close()  # the child holds its end: EOF here once it dies
        self.reader.start()

    def _read(self) -> None:
        conn, results = self.conn, self.results
        try:
            while True:
                results.put((self, conn.recv()))
        except (EOFError, OSError):
            results.put((self, DIED))

    def bind(self, kind: int, fn_bytes: bytes) -> None:
        self.conn.send(("bind", kind, fn_bytes))

    def send(self, token: int, kind: int, fn: Callable[[Any], Any], values: list[Any]) -> None:
        del kind, fn  # bound already
        self.conn.send(("run", token, values))

    def stop(self) -> None:
        self.retired = True
        with contextlib.suppress(OSError):
            self.conn.send(("stop",))

    def kill(self) -> None:
        self.retired = True
        with contextlib.suppress(OSError, ValueError):
            self.process.kill()

    def reaped(self) -> bool:
        """Whether the process has ended (and is reaped): a retired lessee is kept until then."""
        return not self.process.is_alive()


# -- the process lessee's side ----------------------------------------------------------------------


def serve(conn: Connection, progress: MutableSequence[float]) -> None:
    """A process lessee's loop: bind, run batches, stop; it ends on EOF too (its lessor is gone)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the lessor's to handle
    kind = 0
    fn: Callable[[Any], Any] | None = None
    broken: BaseException | None = None
    conn.send(READY)
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        tag = message[0]
        if tag == "run":
            _, token, values = message
            if fn is None:
                failure = broken or RuntimeError("no function bound to this lessee")
                outcomes: list[Outcome] = [(False, failure)] * len(values)
                seconds = 0.0
            else:
                outcomes, seconds = run_batch(kind, fn, values, progress)
            _reply(conn, (token, outcomes, seconds))
        elif tag == "bind":
            kind = message[1]
            try:
                fn, broken = pickle.loads(message[2]), None
            except BaseException as exc:  # an import the lessee cannot make: every call says so
                fn, broken = None, exc
        else:
            return


def _reply(conn: Connection, reply: tuple[int, list[Outcome], float]) -> None:
    try:
        data = pickle.dumps(reply, pickle.HIGHEST_PROTOCOL)
    except Exception:  # one outcome cannot travel: make each portable, keep the rest as they are
        token, outcomes, seconds = reply
        data = pickle.dumps((token, [_portable(o) for o in outcomes], seconds), pickle.HIGHEST_PROTOCOL)
    conn.send_bytes(data)


def _portable(outcome: Outcome) -> Outcome:
    try:
        pickle.dumps(outcome, pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        ok, payload = outcome
        if ok:
            return False, RemoteError(
                "UnpicklableResult", f"the step's result cannot leave its lessee: {exc}"
            )
        return False, RemoteError(type(payload).__name__, str(payload))
    return outcome
