"""The cost of counting a produced record in its output epoch, on the produce call itself.

Every record a worker writes carries its epoch's delivery callback and is counted in the epoch
(:class:`cadenza.worker.output.Epoch`), so that checkpoints need not flush. This times confluent-kafka's
``produce()`` into a local queue (no broker is contacted: the records stay queued and are purged)
with a producer-level callback, the way records were produced before, and with a per-record
callback plus the count; median of 7 rounds of 100,000 records each.

    python benchmarks/bench_produce_callback.py
"""

from __future__ import annotations

import statistics
import time

from confluent_kafka import KafkaError, Message, Producer

RECORDS = 100_000
ROUNDS = 7


class _Epoch:
    __slots__ = ("unacked",)

    def __init__(self) -> None:
        self.unacked = 0

    def delivered(self, error: KafkaError | None, message: Message) -> None:
        self.unacked -= 1


def _ignore(error: KafkaError | None, message: Message) -> None:
    pass


def main() -> None:
    producer = Producer(
        {
            "bootstrap.servers": "127.0.0.1:1",  # never reached: nothing is flushed
            "queue.buffering.max.messages": 2 * RECORDS,
            "linger.ms": 100_000,
            "on_delivery": _ignore,
        }
    )
    epoch = _Epoch()
    deliver = epoch.delivered
    value = b"v" * 100

    def producer_level() -> float:
        started = time.perf_counter()
        for _ in range(RECORDS):
            producer.produce("t", value, b"k", -1, headers=None)
        return (time.perf_counter() - started) / RECORDS * 1e9

    def per_record() -> float:
        started = time.perf_counter()
        for _ in range(RECORDS):
            producer.produce("t", value, b"k", -1, headers=None, on_delivery=deliver)
            epoch.unacked += 1
        return (time.perf_counter() - started) / RECORDS * 1e9

    before: list[float] = []
    after: list[float] = []
    for _ in range(ROUNDS):
        before.append(producer_level())
        after.append(per_record())
        producer.purge()
        producer.poll(0)
    print(
        f"produce() ns per record: producer-level callback {statistics.median(before):.0f}, "
        f"epoch callback and count {statistics.median(after):.0f}"
    )


if __name__ == "__main__":
    main()
