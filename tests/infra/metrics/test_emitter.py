"""The span emitter: sampling, batching by count and by time, the bounded buffer, and shutdown."""

from __future__ import annotations

import time

import pytest

from cadenza.infra.metrics.emitter import SpanEmitter
from cadenza.infra.metrics.sampling import is_sampled
from cadenza.infra.metrics.spans import decode_span, span_key
from tests.infra.metrics.helpers import ListSink, wait_until

T_F = 1_700_000_000.0


def emit(emitter: SpanEmitter, trace_id: int, *, sink: bool = False, operator: str = "map") -> bool:
    return emitter.emit("ads", "clicks", operator, 1, trace_id, 0.001, 0.002, T_F, 0.5, T_F + 0.1, sink)


def test_count_threshold_sends_exactly_one_batch_when_polled() -> None:
    sink = ListSink()
    emitter = SpanEmitter(sink, worker_id="w", batch_size=10, linger=60.0)
    for trace in range(9):
        emit(emitter, trace)
    assert emitter.poll() == 0 and sink.records == []
    emit(emitter, 9)
    assert emitter.poll() == 10
    assert sink.batches == [10]
    assert [decode_span(value).trace_id for _, value in sink.records] == list(range(10))
    assert [key for key, _ in sink.records] == [span_key(t) for t in range(10)]


def test_time_threshold_sends_a_partial_batch_when_polled() -> None:
    sink = ListSink()
    emitter = SpanEmitter(sink, worker_id="w", batch_size=1000, linger=0.05)
    emitter.poll()  # restarts the linger clock
    for trace in range(3):
        emit(emitter, trace)
    assert emitter.poll() == 0
    time.sleep(0.06)
    assert emitter.poll() == 3
    assert sink.batches == [3]


def test_background_sender_batches_by_count() -> None:
    sink = ListSink()
    with SpanEmitter(sink, worker_id="w", batch_size=50, linger=60.0) as emitter:
        for trace in range(49):
            emit(emitter, trace)
        time.sleep(0.2)
        assert sink.records == [], "no batch may leave before batch_size spans or linger seconds"
        emit(emitter, 49)
        assert wait_until(lambda: len(sink.records) == 50, timeout=5.0)
        assert emitter.poll() == 0  # the sender thread owns sending
    assert sink.closed
    assert sink.batches == [50]


def test_background_sender_batches_by_time() -> None:
    sink = ListSink()
    with SpanEmitter(sink, worker_id="w", batch_size=1000, linger=0.1) as emitter:
        started = time.monotonic()
        for trace in range(3):
            emit(emitter, trace)
        assert wait_until(lambda: len(sink.records) == 3, timeout=5.0)
        assert time.monotonic() - started < 2.0
    assert sum(sink.batches) == 3  # one batch, unless the linger tick fell between two emits


def test_full_buffer_drops_and_counts_without_blocking() -> None:
    sink = ListSink()
    emitter = SpanEmitter(sink, worker_id="w", batch_size=10, linger=60.0, max_buffered=10)
    kept = [emit(emitter, trace) for trace in range(25)]
    assert kept == [True] * 10 + [False] * 15
    assert emitter.buffered == 10
    assert emitter.dropped_buffer_full == 15
    assert emitter.dropped_by_reason()[("buffer_full",)] == 15
    assert emitter.poll() == 10
    assert emit(emitter, 99) is True  # room again once the sender drained
    assert emitter.dropped == 15


def test_sampling_keeps_whole_traces_and_the_ratio() -> None:
    sink = ListSink()
    emitter = SpanEmitter(
        sink, worker_id="w", sample_ratio=0.1, batch_size=100_000, linger=60.0, max_buffered=100_000
    )
    for trace in range(10_000):
        emit(emitter, trace, operator="map")
        emit(emitter, trace, operator="sink", sink=True)
    expected = {t for t in range(10_000) if is_sampled(t, 0.1)}
    assert 900 < len(expected) < 1100
    emitter.flush()
    spans = [decode_span(value) for _, value in sink.records]
    assert len(spans) == 2 * len(expected)
    assert {s.trace_id for s in spans if s.operator_id == "map"} == expected
    assert {s.trace_id for s in spans if s.operator_id == "sink"} == expected
    assert all(s.sample_ratio == 0.1 for s in spans)


def test_spans_carry_the_run() -> None:
    sink = ListSink()
    emitter = SpanEmitter(sink, worker_id="worker-7", batch_size=1, linger=60.0)
    emitter.emit("ads", "clicks", "sink", 3, 42, 0.25, 0.125, T_F, 0.5, T_F + 0.75, True)
    emitter.poll()
    (span,) = [decode_span(value) for _, value in sink.records]
    assert (span.tenant_id, span.pipeline_id, span.operator_id, span.worker_id, span.partition) == (
        "ads",
        "clicks",
        "sink",
        "worker-7",
        3,
    )
    assert (span.queue_wait_s, span.run_time_s, span.deadline, span.emitted_at) == (
        0.25,
        0.125,
        T_F + 0.5,
        T_F + 0.75,
    )
    assert span.e2e_latency_s == 0.75 and span.met is False


def test_refused_and_unencodable_spans_are_counted() -> None:
    sink = ListSink(refuse=True)
    emitter = SpanEmitter(sink, worker_id="w", batch_size=5, linger=60.0)
    for trace in range(5):
        emit(emitter, trace)
    emitter.poll()
    assert emitter.dropped_by_reason()[("producer_full",)] == 5
    sink.refuse = False
    emitter.emit("ads", "clicks", "map", 1, 1, 0.0, 0.0, float("nan"), 0.5, T_F, False)
    emitter.flush()
    assert emitter.dropped_by_reason()[("encode",)] == 1
    assert emitter.sent == 0


def test_close_sends_what_is_buffered() -> None:
    sink = ListSink()
    emitter = SpanEmitter(sink, worker_id="w", batch_size=100, linger=60.0)
    emitter.start()
    for trace in range(7):
        emit(emitter, trace)
    emitter.close(timeout=5.0)
    assert len(sink.records) == 7 and sink.closed
    assert not emitter.running
    with pytest.raises(RuntimeError):
        emitter.start()


@pytest.mark.parametrize(
    "kwargs",
    [{"batch_size": 0}, {"linger": 0.0}, {"batch_size": 10, "max_buffered": 5}, {"sample_ratio": 2.0}],
)
def test_bad_settings_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        SpanEmitter(ListSink(), worker_id="w", **kwargs)  # type: ignore[arg-type]
