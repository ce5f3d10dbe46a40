"""CPU cost per record of the source decode stage alone (``SourceDecoder.decode``), JSON and Avro.

No broker and no scheduler: 20,000 in-memory ``confluent_kafka.Message`` objects of one pydantic
model are decoded (value, event time from a field) seven times; the median and the minimum of the
per-record thread CPU time are printed. It isolates what a codec change costs on the hot path, which
``bench_hot_path.py`` measures only together with everything else.

    python benchmarks/probes/bench_decode.py
"""

from __future__ import annotations

import statistics
import time
from typing import Literal, cast

from confluent_kafka import TIMESTAMP_CREATE_TIME, Message
from pydantic import BaseModel

from cadenza.pipelines import Pipeline
from cadenza.schemas import AvroCodec
from cadenza.worker.engine.dead_letter import DeadLetters
from cadenza.worker.engine.decode import SourceDecoder

RECORDS = 20_000
ROUNDS = 7


class Event(BaseModel):
    id: int
    user: str
    amount: float
    ts: float


def per_record_us(value_format: Literal["json", "avro"]) -> tuple[float, float]:
    pipeline = Pipeline("bench-decode", tenant="t", latency_target="1s")
    pipeline.source("in", value=Event, format=value_format, timestamp="ts").sink("out")
    graph = pipeline.compile()
    decoder = SourceDecoder(
        "bench-decode",
        graph.node("1-source"),
        graph.functions["1-source"],
        dead=cast(DeadLetters, None),  # every record decodes: nothing is dead-lettered
        needs_event_time=True,
    )
    events = [Event(id=i, user=f"u{i % 50}", amount=i / 3, ts=1.7e9 + i) for i in range(RECORDS)]
    if value_format == "json":
        values = [e.model_dump_json().encode() for e in events]
        headers: list[tuple[str, str | bytes | None]] | None = None
    else:
        codec = AvroCodec(Event)
        values = [codec.encode(e) for e in events]
        headers = list(codec.headers())
    messages = [
        Message(
            topic="in",
            partition=0,
            offset=i,
            key=None,
            value=v,
            headers=headers,
            timestamp=(TIMESTAMP_CREATE_TIME, 0),
        )
        for i, v in enumerate(values)
    ]
    runs = []
    for _ in range(ROUNDS):
        started = time.thread_time()
        for offset, message in enumerate(messages):
            decoder.decode(message, "in", 0, offset)
        runs.append((time.thread_time() - started) / RECORDS * 1e6)
    return statistics.median(runs), min(runs)


def main() -> None:
    formats: tuple[Literal["json", "avro"], ...] = ("json", "avro")
    for value_format in formats:
        median, least = per_record_us(value_format)
        print(f"{value_format}: {median:.3f} us/record (min {least:.3f})")


if __name__ == "__main__":
    main()
