"""Issue 8, item 3: a ``cadenza worker`` process SIGKILLed under load at random moments, three times, and
restarted each time; with one fetch lane, and with two (issue 16: the count pipeline reads its copy
of the input from a topic of the bulk lane, the copy pipeline from one of the urgent lane).

Input streams in while the workers run and die. Two pipelines read it:

- ``copy``: a stateless map whose result names the process that made it (its pid). Every input
  must reach the sink at least once. A duplicate is legitimate only if it was *in flight* at a kill:
  made by the killed process from a record at or above the offset the group had committed when it
  died (read right after each kill). The test asserts that every duplicated record was in flight at
  some kill and that the extra copies number no more than the in-flight results of all kills;
- ``count``: per-key tumbling-window counts (state restored from the changelog after each kill).
  After the last restart every window's count must be exactly right (duplicated result records are
  allowed, wrong or missing ones are not).

A record running at two deaths in a row is a poison pill to the worker (issue 15): it is
quarantined, dead-lettered instead of run a third time. Random kills can land on the same record
twice (the second worker replays the first one's records alone behind markers, so a kill during that
replay often hits the record the first kill hit): such a record is accounted for by its dead letter
(never by silence), and the windows are checked against the input without it.
"""

from __future__ import annotations

import json
import random
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition

from cadenza.infra.kafka.clients import make_consumer
from cadenza.schemas.errors import ERROR_TYPE_HEADER
from cadenza.settings import KafkaSettings
from cadenza.testing.pytest_plugin import NewTopic
from cadenza.worker.engine.dead_letter import QUARANTINED_ERROR
from tests.reliability._support import WorkerProcess, quick, wait_reading
from tests.worker.kafka_io import Outgoing, Reader, Record, produce

pytestmark = [
    pytest.mark.slow(
        "SIGKILLs a loaded worker process three times; each restart rejoins the group and restores"
    ),
    pytest.mark.kafka,
    pytest.mark.timeout(150),
]

PARTITIONS = 2
KEYS = 8
EVENTS = 6000
CHUNK = 500
SPACING = 0.01  # event seconds between consecutive events
KILLS = 3
FLUSH_TS = 1_000_000.0

PIPELINES = """
import os
import time

from pydantic import BaseModel

from cadenza.pipelines import Pipeline, Tumbling


class Reading(BaseModel):
    id: int
    key: str
    ts: float


def stamp(reading: Reading) -> dict:
    time.sleep(0.002)  # a backlog builds up (about 12 s of work): every kill lands under load
    return {"id": reading.id, "pid": os.getpid()}


env = os.environ
copy = Pipeline(
    env["CR_PREFIX"] + "-copy",
    tenant="t",
    latency_target=env["CR_COPY_TARGET"],
    dead_letter_topic=env["CR_COPY_DLQ"],
)
copy.source(env["CR_SOURCE"], value=Reading).map(stamp).sink(env["CR_COPY_OUT"])

count = Pipeline(
    env["CR_PREFIX"] + "-count",
    tenant="t",
    latency_target=env["CR_COUNT_TARGET"],
    dead_letter_topic=env["CR_COUNT_DLQ"],
)
(
    count.source(env["CR_COUNT_SOURCE"], value=Reading, key=str, timestamp="ts", max_out_of_orderness=0.5)
    .window(Tumbling("1s"))
    .count()
    .sink(env["CR_COUNT_OUT"])
)
"""

Row = tuple[int, str, float, int]  # id, key, event time, partition


def make_rows() -> list[Row]:
    # Keys live on fixed partitions and event time only grows: no record is late, so every window's
    # count is known exactly.
    return [(i, f"k{i % KEYS}", round(i * SPACING, 2), (i % KEYS) % PARTITIONS) for i in range(EVENTS)]


def encode(rows: list[Row]) -> list[Outgoing]:
    return [(key.encode(), json.dumps({"id": i, "key": key, "ts": ts}).encode(), p) for i, key, ts, p in rows]


def expected_windows(rows: list[Row], quarantined: set[int]) -> dict[tuple[str, float], int]:
    return dict(Counter((key, float(int(ts))) for i, key, ts, _ in rows if i not in quarantined))


def quarantined_ids(records: list[Record]) -> set[int]:
    """The ids of the records a pipeline quarantined (dead letters of that kind: their value is the input)."""
    return {
        json.loads(r.value or b"")["id"]
        for r in records
        if r.headers.get(ERROR_TYPE_HEADER) == QUARANTINED_ERROR.encode()
    }


def made_by(records: list[Record], pid: int) -> int:
    """How many copy results process ``pid`` made."""
    return sum(1 for r in records if json.loads(r.value or b"")["pid"] == pid)


def committed(settings: KafkaSettings, group: str, topic: str) -> dict[int, int]:
    """The group's committed offsets per partition (a consumer that asks, without joining)."""
    consumer, _ = make_consumer(settings, group)
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
    finally:
        consumer.close()
    return {tp.partition: max(tp.offset, 0) for tp in found}


#: (copy's target, count's target, whether count reads a copy of the input from a topic of its own):
#: one lane, or two (copy's topic urgent, count's bulk: two consumers in the group, both killed).
LAYOUTS = {"one-lane": ("1s", "1s", False), "two-lanes": ("200ms", "5s", True)}


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_sigkilled_workers_lose_nothing_and_duplicate_only_what_was_in_flight(
    kafka_settings: KafkaSettings, new_topic: NewTopic, tmp_path: Path, layout: str
) -> None:
    settings = quick(kafka_settings)
    source, copy_out, count_out = new_topic(partitions=PARTITIONS), new_topic(), new_topic()
    copy_dlq, count_dlq = new_topic(), new_topic()
    module = tmp_path / "crash_pipelines.py"
    module.write_text(PIPELINES)
    prefix = f"cr-{uuid.uuid4().hex[:6]}"
    copy_target, count_target, apart = LAYOUTS[layout]
    count_source = new_topic(partitions=PARTITIONS) if apart else source
    env = {
        "CR_PREFIX": prefix,
        "CR_SOURCE": source,
        "CR_COPY_OUT": copy_out,
        "CR_COUNT_OUT": count_out,
        "CR_COPY_TARGET": copy_target,
        "CR_COUNT_TARGET": count_target,
        "CR_COUNT_SOURCE": count_source,
        "CR_COPY_DLQ": copy_dlq,
        "CR_COUNT_DLQ": count_dlq,
        "CADENZA_LANES": "auto" if apart else "off",
    }
    group, log = f"g-{prefix}", tmp_path / "worker.log"
    seed = random.randrange(1 << 30)
    chance = random.Random(seed)
    rows = make_rows()
    where: dict[int, tuple[int, int]] = {}  # id -> (partition, offset)

    def produce_rows(chunk: list[Row]) -> None:
        offsets = produce(settings, source, encode(chunk))
        if count_source != source:
            produce(settings, count_source, encode(chunk))
        for (i, _, _, p), offset in zip(chunk, offsets, strict=True):
            where[i] = (p, offset)

    produce_rows(rows[:CHUNK])

    def stream_rest() -> None:
        for start in range(CHUNK, EVENTS, CHUNK):
            produce_rows(rows[start : start + CHUNK])
            time.sleep(0.25)

    streaming = threading.Thread(target=stream_rest, daemon=True)
    reader = Reader(settings, [copy_out, count_out, copy_dlq, count_dlq])
    kills: list[tuple[int, dict[int, int]]] = []  # (pid killed, committed offsets right after)
    worker = WorkerProcess(module, settings, group, log, "--max-buffered", "1000", env=env)
    try:
        for kill in range(KILLS):
            # Results made by this very process (the reader may still be catching up with the last
            # one's): a kill before the new process produced anything would test no replay.
            wait_reading(
                reader,
                lambda pid=worker.pid: made_by(reader.records[copy_out], pid) > 50,  # type: ignore[misc]
                60,
                f"results before kill {kill}",
                worker,
            )
            if kill == 0:
                streaming.start()
            deadline = time.monotonic() + chance.uniform(0.1, 1.0)  # a random moment under load
            while time.monotonic() < deadline:
                reader.poll(0.05)
            worker.kill()
            kills.append((worker.pid, committed(settings, group, source)))
            worker = WorkerProcess(module, settings, group, log, "--max-buffered", "1000", env=env)
        streaming.join(60)
        flush: list[Outgoing] = [
            (
                f"~flush{p}".encode(),
                json.dumps({"id": -1 - p, "key": f"~flush{p}", "ts": FLUSH_TS}).encode(),
                p,
            )
            for p in range(PARTITIONS)
        ]
        produce(settings, source, flush)
        if count_source != source:
            produce(settings, count_source, flush)

        def windows() -> dict[tuple[str, float], set[int]]:
            found: dict[tuple[str, float], set[int]] = {}
            for r in reader.records[count_out]:
                value = json.loads(r.value or b"")
                if not str(value["key"]).startswith("~"):
                    found.setdefault((value["key"], value["window_start"]), set()).add(value["value"])
            return found

        def accounted() -> set[int]:
            """Ids with a copy, or quarantined by the copy pipeline (dead-lettered, not lost)."""
            copied = {json.loads(r.value or b"")["id"] for r in reader.records[copy_out]}
            return copied | quarantined_ids(reader.records[copy_dlq])

        def missing_copies() -> list[tuple[int, int, int]]:
            seen = accounted()
            ids = [i for i in range(-PARTITIONS, EVENTS) if i not in seen]
            return [(i, *where.get(i, (-1 - i, -1))) for i in ids]

        every_window = expected_windows(rows, set())
        wait_reading(
            reader,
            lambda: len(accounted()) >= EVENTS + PARTITIONS and windows().keys() >= every_window.keys(),
            90,
            lambda: (
                f"every result after {KILLS} kills (seed {seed}): {len(accounted())} of "
                f"{EVENTS + PARTITIONS} copies or quarantines, {len(every_window.keys() - windows().keys())} "
                f"of {len(every_window)} windows missing; missing copies (id, partition, offset): "
                f"{missing_copies()[:10]}; kills (pid, committed after): {kills}; worker log: {log}"
            ),
            worker,
        )
        assert worker.terminate() == 0, worker.text()[-2000:]
        reader.settle(0.5)
    finally:
        worker.kill()
        reader.close()

    # At least once: every input's result is there, or its dead letter says it was quarantined.
    copies = [json.loads(r.value or b"") for r in reader.records[copy_out]]
    per_id = Counter(c["id"] for c in copies if c["id"] >= 0)
    quarantined = quarantined_ids(reader.records[copy_dlq])
    lost = set(range(EVENTS)) - set(per_id) - quarantined
    assert not lost, f"lost: {sorted(lost)[:20]}"
    # A quarantine takes two deaths in a row on one record: at most one per pair of kills.
    assert len(quarantined) <= KILLS - 1, f"quarantined {sorted(quarantined)} with only {KILLS} kills"
    # Duplicates only from what was in flight at a kill.
    in_flight: set[tuple[int, int]] = set()  # (pid, id)
    for pid, offsets in kills:
        for c in copies:
            if c["pid"] == pid and c["id"] >= 0:
                partition, offset = where[c["id"]]
                if offset >= offsets.get(partition, 0):
                    in_flight.add((pid, c["id"]))
    duplicated = {i for i, n in per_id.items() if n > 1}
    extra = sum(n - 1 for n in per_id.values())
    assert duplicated <= {i for _, i in in_flight}, "a committed record was processed twice"
    assert extra <= len(in_flight)
    assert in_flight, "no kill caught results in flight: the test did not exercise replays"
    # Window counts: complete and right, however often a result was emitted again. A window holding a
    # record the count pipeline quarantined counts it or not: its count unit may have run, and been
    # changelogged, before the deaths that the copy unit of the same record was running at.
    got = windows()
    skipped = quarantined_ids(reader.records[count_dlq])
    without = expected_windows(rows, skipped)
    assert set(got) == set(every_window)
    touched = {(f"k{i % KEYS}", float(int(round(i * SPACING, 2)))) for i in skipped}
    assert {k: got[k] for k in every_window if k not in touched} == {
        k: {n} for k, n in without.items() if k not in touched
    }
    for k in touched:
        assert got[k] <= {without.get(k, 0), every_window[k]}, (k, got[k])
    flights = [sum(1 for p, _ in in_flight if p == pid) for pid, _ in kills]
    print(
        f"seed {seed}: {KILLS} SIGKILLs; in flight at the kills {flights}"
        f" results; {extra} duplicated results of {EVENTS}; {len(quarantined)} quarantined; "
        f"{len(reader.records[count_out])} window results for {len(every_window)} windows"
    )
