"""When a worker publishes its true rates: once per closed window, never waiting, under a VirtualClock."""

from __future__ import annotations

from typing import Any

import pytest

from cadenza.feedback.records import KIND_HEADER, TRUE_RATES_KIND
from cadenza.infra.kafka.headers import get_header
from cadenza.scaling import RateSample, TrueRateMeter, parse_true_rates
from cadenza.scheduling.clock import VirtualClock
from cadenza.worker.engine.memory import MemoryProducer, MemoryTopics
from cadenza.worker.tuning.rates import RatesPublisher, SubTopologyKey

TOPIC = "feedback"
KEY: SubTopologyKey = ("acme", "clicks", "clicks.in")


class Counters:
    """A sub-topology's cumulative counters, advanced by the test."""

    def __init__(self) -> None:
        self.sample = RateSample(0, 0, 0.0)

    def work(self, processed: int, produced: int, busy_s: float) -> None:
        s = self.sample
        self.sample = RateSample(s.processed + processed, s.produced + produced, s.busy_s + busy_s)

    def read(self) -> dict[SubTopologyKey, RateSample]:
        return {KEY: self.sample}


def _setup(
    window_s: float = 10.0,
) -> tuple[VirtualClock, Counters, TrueRateMeter[SubTopologyKey], MemoryProducer]:
    clock, counters = VirtualClock(1_764_158_400.0), Counters()
    meter = TrueRateMeter(clock, counters.read, window_s)
    return clock, counters, meter, MemoryProducer(MemoryTopics({TOPIC: 1}, clock.now))


def test_one_record_per_window_closed_by_the_loop() -> None:
    clock, counters, meter, producer = _setup()
    publisher = RatesPublisher(meter, "host-7", producer, TOPIC)
    start = clock.now()
    published = []
    # the worker's loop polls every 1/8 s for 35 s, doing 50 records (1/64 s busy) per poll: steps
    # exact in binary, so the windows close exactly at 10, 20 and 30 s
    for _ in range(280):
        clock.advance(0.125)
        counters.work(50, 100, 0.015625)
        if publisher.poll():
            published.append(clock.now() - start)
    records = producer.take()
    assert published == [10.0, 20.0, 30.0] and len(records) == publisher.published == 3
    for number, record in enumerate(records):
        assert record.key == b"host-7"
        assert get_header(record.headers, KIND_HEADER) == TRUE_RATES_KIND
        rates = parse_true_rates(record.value)
        assert rates.worker == "host-7"
        assert (rates.window_start, rates.window_end) == (start + 10.0 * number, start + 10.0 * (number + 1))
        (entry,) = rates.rates
        assert (entry.tenant, entry.pipeline, entry.sub_topology) == KEY
        # per window: 80 polls of 50 records in 80/64 busy seconds and 10 wall seconds
        assert entry.true_processing == pytest.approx(50 * 64)
        assert entry.true_output == pytest.approx(2 * 50 * 64)
        assert entry.observed_processing == pytest.approx(50 * 8)
        assert entry.observed_output == pytest.approx(2 * 50 * 8)
    assert (publisher.dropped, publisher.failed) == (0, 0)


def test_a_window_a_scrape_closed_is_published_once_and_not_cut_short() -> None:
    clock, counters, meter, producer = _setup()
    publisher = RatesPublisher(meter, "host-7", producer, TOPIC)
    clock.advance(5.0)
    counters.work(10, 10, 0.5)
    assert not publisher.poll() and meter.rates() == {}  # a scrape mid-window closes nothing
    clock.advance(6.0)
    scraped = meter.rates()  # a scrape closes the window at 11 s
    assert meter.closed == 1
    clock.advance(0.1)
    assert publisher.poll()  # the loop publishes that window, with the rates the scrape saw
    assert not publisher.poll()  # and only once
    (record,) = producer.take()
    (entry,) = parse_true_rates(record.value).rates
    assert entry.instance == scraped[KEY]
    assert meter.closed == 1  # the publisher read the scrape's window and did not close another
    clock.advance(9.5)  # the next window opened at 11 s: not due at 20.6 s
    assert not publisher.poll() and producer.take() == []
    clock.advance(0.5)
    assert publisher.poll() and meter.closed == 2 and len(producer.take()) == 1


class FullProducer(MemoryProducer):
    """A producer whose local queue is full: ``produce`` refuses at once, as librdkafka's does."""

    def produce(self, *args: Any, **kwargs: Any) -> None:
        raise BufferError("Local: Queue full")


def test_a_refused_record_is_dropped_and_counted_not_waited_for() -> None:
    clock, counters, meter, _ = _setup()
    producer = FullProducer(MemoryTopics({TOPIC: 1}, clock.now))
    publisher = RatesPublisher(meter, "host-7", producer, TOPIC)
    clock.advance(10.0)
    counters.work(1, 1, 0.1)
    assert not publisher.poll()
    assert (publisher.dropped, publisher.published) == (1, 1)  # not retried: the next window is fresher
    assert not publisher.poll() and publisher.dropped == 1
    clock.advance(10.0)
    assert not publisher.poll() and (publisher.dropped, publisher.published) == (2, 2)
