"""The span emitter: what the worker calls once per operator execution of a record.

The call sits on the executor's hot path, so it does the least it can: a sampling test on the trace
id (one multiplication), a bound check and one append of the raw measurements to a deque. Everything
else (deriving the span, Avro encoding, producing) happens later, in batches, on a sender thread:
every ``batch_size`` spans or every ``linger`` seconds, whichever comes first.

The buffer is bounded. When the sender (or the metrics topic behind it) cannot keep up, new spans
are dropped and counted instead of making the worker wait or letting memory grow: spans are samples,
a gap in them is visible (``cadenza_spans_dropped``) and harmless, a stalled executor is not.

Threads: ``emit`` is called from one thread (the executor); the sender is the only consumer of the
buffer. ``collections.deque`` appends and pops are atomic, so they need no lock. Without
:meth:`SpanEmitter.start`, no thread runs and the owner calls :meth:`SpanEmitter.poll` from its loop
instead, which sends a batch when one is due.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import Any

from cadenza.infra.lifecycle import Lifecycle
from cadenza.infra.metrics.sampling import FIBONACCI_MULTIPLIER, sample_threshold
from cadenza.infra.metrics.span_sink import KafkaSpanSink, SpanSink
from cadenza.infra.metrics.span_writer import SpanWriter
from cadenza.infra.metrics.spans import SPAN_CODEC, SpanRun, span_key
from cadenza.settings import KafkaSettings

__all__ = ["SpanEmitter"]

_log = logging.getLogger("cadenza.metrics.spans")

_MASK = (1 << 64) - 1


class SpanEmitter(Lifecycle):
    """Samples, buffers and batches spans for a :class:`SpanSink` (normally the metrics topic).

    ``sample_ratio``: share of traces kept, decided by trace id (see
    :mod:`cadenza.infra.metrics.sampling`). ``batch_size`` and ``linger``: a batch is sent when that
    many spans are buffered or that many seconds have passed. ``max_buffered``: the bound beyond
    which new spans are dropped (``dropped_buffer_full``).
    """

    __slots__ = (
        "_batch_size",
        "_buffer",
        "_closed",
        "_drain_lock",
        "_last_drain",
        "_linger",
        "_max_buffered",
        "_sending",
        "_sink",
        "_stop",
        "_thread",
        "_threshold",
        "_wake",
        "_writer",
        "dropped_buffer_full",
        "dropped_encode",
        "dropped_producer_full",
        "sample_ratio",
        "sent",
        "worker_id",
    )

    def __init__(
        self,
        sink: SpanSink,
        *,
        worker_id: str,
        sample_ratio: float = 1.0,
        batch_size: int = 500,
        linger: float = 1.0,
        max_buffered: int = 20_000,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"span batch_size must be >= 1, got {batch_size!r}")
        if not (0.0 < linger < 3600.0):
            raise ValueError(f"span linger must be in (0, 3600) seconds, got {linger!r}")
        if max_buffered < batch_size:
            raise ValueError(f"max_buffered ({max_buffered}) must be at least batch_size ({batch_size})")
        self._threshold = sample_threshold(sample_ratio)
        self.sample_ratio = float(sample_ratio)
        self.worker_id = worker_id
        self._sink = sink
        self._writer = SpanWriter(worker_id, self.sample_ratio)
        self._batch_size = batch_size
        self._linger = float(linger)
        self._max_buffered = max_buffered
        self._buffer: deque[SpanRun] = deque()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._drain_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._sending = False
        self._closed = False
        self._last_drain = time.monotonic()
        #: Sampled spans refused because the buffer was full (written by the emitting thread only).
        self.dropped_buffer_full = 0
        #: Spans the sink refused because its own queue was full (written by the sender only).
        self.dropped_producer_full = 0
        #: Spans whose fields could not be encoded, e.g. a non-finite time (written by the sender only).
        self.dropped_encode = 0
        #: Spans handed to the sink.
        self.sent = 0

    @classmethod
    def to_kafka(
        cls,
        settings: KafkaSettings,
        topic: str,
        *,
        worker_id: str,
        sample_ratio: float = 1.0,
        batch_size: int = 500,
        linger: float = 1.0,
        max_buffered: int = 20_000,
        **producer_overrides: Any,
    ) -> SpanEmitter:
        """An emitter producing to the metrics ``topic`` with a producer of its own."""
        sink = KafkaSpanSink(settings, topic, SPAN_CODEC.headers(), **producer_overrides)
        return cls(
            sink,
            worker_id=worker_id,
            sample_ratio=sample_ratio,
            batch_size=batch_size,
            linger=linger,
            max_buffered=max_buffered,
        )

    # -- hot path --------------------------------------------------------------------------------

    def emit(  # noqa: PLR0917 - called per record; positional is the cheapest call
        self,
        tenant_id: str,
        pipeline_id: str,
        operator_id: str,
        partition: int,
        trace_id: int,
        queue_wait: float,
        run_time: float,
        frontier_time: float,
        latency_target: float,
        at: float,
        sink: bool = False,
    ) -> bool:
        """Record one execution; return whether its span was kept (sampled and buffered).

        ``at`` is when the run finished (the executor's measurement time, so no clock is read here);
        ``sink`` marks a sink operator's run, whose span gets the end-to-end latency and met flag.
        """
        if (trace_id * FIBONACCI_MULTIPLIER) & _MASK >= self._threshold:
            return False
        buffer = self._buffer
        if len(buffer) >= self._max_buffered:
            self.dropped_buffer_full += 1
            return False
        buffer.append(
            (
                tenant_id,
                pipeline_id,
                operator_id,
                partition,
                trace_id,
                queue_wait,
                run_time,
                frontier_time,
                latency_target,
                at,
                sink,
            )
        )
        if len(buffer) == self._batch_size:
            self._wake.set()
        return True

    # -- sending ---------------------------------------------------------------------------------

    @property
    def buffered(self) -> int:
        """Spans waiting to be sent."""
        return len(self._buffer)

    @property
    def running(self) -> bool:
        thread = self._thread
        return thread is not None and thread.is_alive()

    def start(self) -> None:
        """Start the sender thread (idempotent); from then on :meth:`poll` is not needed."""
        if self._closed:
            raise RuntimeError("span emitter is closed")
        if self.running:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="cadenza-span-sender", daemon=True)
        self._thread.start()

    def poll(self) -> int:
        """Without a sender thread: send a batch if one is due (full, or lingered); return spans sent.

        Cheap when nothing is due (a length check and a clock read), so a loop may call it per batch
        of records. With the sender thread running it does nothing.
        """
        if self._thread is not None or self._closed:
            return 0
        buffer = self._buffer
        if not buffer:
            return 0
        if len(buffer) < self._batch_size and time.monotonic() - self._last_drain < self._linger:
            return 0
        sent = self._drain()
        self._sink.poll()
        return sent

    def flush(self, timeout: float = 10.0) -> bool:
        """Send everything buffered and wait for the sink to deliver it; True if all went out in time."""
        deadline = time.monotonic() + timeout
        if self.running:
            self._wake.set()
            while (self._buffer or self._sending) and time.monotonic() < deadline:
                time.sleep(0.002)
        else:
            self._drain()
        remaining = self._sink.flush(max(0.0, deadline - time.monotonic()))
        return remaining == 0 and not self._buffer

    def close(self, timeout: float = 10.0) -> None:
        """Stop the sender, send what is buffered and flush, within about ``timeout`` seconds."""
        if self._closed:
            return
        deadline = time.monotonic() + timeout
        thread = self._thread
        if thread is not None:
            self._stop.set()
            self._wake.set()
            thread.join(max(0.0, deadline - time.monotonic()))
        self._closed = True
        self._thread = None
        if thread is None or not thread.is_alive():
            self._drain()
        self._sink.close(max(0.0, deadline - time.monotonic()))

    # -- statistics ------------------------------------------------------------------------------

    @property
    def delivered(self) -> int:
        """Spans the metrics topic acknowledged (``cadenza_spans_produced``)."""
        return self._sink.delivered

    def dropped_by_reason(self) -> dict[tuple[str, ...], int]:
        """Drop counts keyed by the ``reason`` label of ``cadenza_spans_dropped``."""
        return {
            ("buffer_full",): self.dropped_buffer_full,
            ("producer_full",): self.dropped_producer_full,
            ("encode",): self.dropped_encode,
            ("delivery",): self._sink.failed,
        }

    @property
    def dropped(self) -> int:
        return sum(self.dropped_by_reason().values())

    # -- internals -------------------------------------------------------------------------------

    def _run(self) -> None:
        wake, stop = self._wake, self._stop
        while not stop.is_set():
            wake.wait(self._linger)
            wake.clear()
            try:
                self._drain()
                self._sink.poll()
            except Exception:  # the sender must outlive any one bad batch; the worker never sees it
                _log.exception("span sender: sending a batch failed")
        try:
            self._drain()
        except Exception:
            _log.exception("span sender: sending the last batch failed")

    def _drain(self) -> int:
        """Encode and send what is buffered now (not what arrives meanwhile, so it always ends)."""
        with self._drain_lock:
            self._sending = True
            try:
                return self._send(len(self._buffer))
            finally:
                self._sending = False
                self._last_drain = time.monotonic()

    def _send(self, count: int) -> int:
        popleft = self._buffer.popleft
        send = self._sink.send
        encode = self._writer.encode_run
        sent = refused = failed = 0
        for _ in range(count):
            raw = popleft()
            try:
                value = encode(raw)
            except Exception:
                failed += 1
                continue
            if send(span_key(raw[4]), value):
                sent += 1
            else:
                refused += 1
        self.sent += sent
        self.dropped_producer_full += refused
        self.dropped_encode += failed
        return sent
