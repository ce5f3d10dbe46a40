"""Issue 15, poison-pill quarantine: a record that was running at two deaths of its worker (a crash the
worker cannot catch, an OOM kill, a hang past the poll interval) is dead-lettered with disposition
``quarantined`` instead of being run again, and the pipeline goes on; a clean stop, or a record that
dies and then passes, quarantines nothing.

The worker is a ``cadenza worker`` process restarted by the test after each death, as a container's
restart policy would; ``os._exit(137)`` stands in for an OOM kill or a segfault. Each test has its
own crash directory (``--crash-dir``): restarted on the same host, a worker reads the crash slot its
dead predecessor left there and pins the record exactly, so a poison pill dies twice; without it (a
fresh directory per restart, as on another host) the Kafka marks alone decide, three deaths at most,
four when the range a death leaves is long enough to be replayed in chunks.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from cadenza.settings import KafkaSettings
from cadenza.testing.pytest_plugin import NewTopic
from cadenza.worker.engine.dead_letter import DISPOSITION_HEADER, SOURCE_OFFSET_HEADER
from tests.reliability._support import Headed, WorkerProcess, group, produce_with_headers, quick
from tests.worker.kafka_io import Reader, Record, reading

pytestmark = [
    pytest.mark.slow(
        "worker processes die and restart (one hangs past the poll interval); each restart is a group join"
    ),
    pytest.mark.kafka,
]

RECORDS = 30
#: Log lines unwrapped, so that the test can find them.
WIDE = {"COLUMNS": "400"}
POISON = 10

MODULE = """
import os
import time
from collections.abc import Callable
from pathlib import Path

from cadenza import Pipeline

def check(value):
    if value["n"] == {poison}:
        {action}
    return value

p = Pipeline("q-{suffix}", tenant="t", latency_target="1s", dead_letter_topic={dlq!r})
p.source({source!r}).map(check).sink({sink!r})
"""

CRASH = "os._exit(137)  # an OOM kill or a segfault: nothing can catch it"
HANG = "time.sleep({seconds})  # past --max-poll-interval"
# Dies the first ``times`` times it meets the record, then passes (a flaky crash).
FLAKY = """counter = Path({path!r})
        seen = int(counter.read_text()) if counter.exists() else 0
        counter.write_text(str(seen + 1))
        if seen < {times}:
            os._exit(137)"""


def _module(tmp_path: Path, action: str, source: str, sink: str, dlq: str) -> Path:
    module = tmp_path / "poison.py"
    module.write_text(
        MODULE.format(
            poison=POISON, action=action, suffix=tmp_path.name[-8:], source=source, sink=sink, dlq=dlq
        )
    )
    return module


def _records() -> list[Headed]:
    return [
        (f"k{n}".encode(), json.dumps({"n": n}).encode(), 0, [("origin", f"test-{n}")])
        for n in range(RECORDS)
    ]


def _results(reader: Reader, sink: str) -> list[int]:
    return [json.loads(r.value or b"")["n"] for r in reader.records[sink]]


def _at_least(topic: str, count: int) -> Callable[[dict[str, list[Record]]], bool]:
    return lambda got: len(got[topic]) >= count


def _all_but_poison(records: list[Record]) -> bool:
    return set(range(RECORDS)) - {POISON} <= {json.loads(r.value or b"")["n"] for r in records}


def _run_with_restarts(
    module: Path,
    settings: KafkaSettings,
    name: str,
    log: Path,
    reader: Reader,
    *args: str,
    done: Callable[[dict[str, list[Record]]], bool],
    timeout: float,
    crash_dir: Callable[[int], Path],
) -> tuple[WorkerProcess, list[int]]:
    """Start the worker, restart it after every death, until ``done(reader.records)``; return the
    running worker and the exit codes of the dead ones. ``crash_dir(n)``: the n-th start's."""
    deadline = time.monotonic() + timeout
    codes: list[int] = []

    def start() -> WorkerProcess:
        where = ["--crash-dir", str(crash_dir(len(codes)))]
        return WorkerProcess(module, settings, name, log, *args, *where, env=WIDE, metrics=True)

    worker = start()
    while True:
        reader.poll(0.2)
        if done(reader.records):
            return worker, codes
        code = worker.process.poll()
        if code is not None:
            codes.append(code)
            assert len(codes) <= 4, f"too many deaths {codes}:\n{worker.text()[-3000:]}"
            worker = start()
        assert time.monotonic() < deadline, (
            f"not done within {timeout:.0f} s (deaths {codes}):\n{worker.text()[-4000:]}"
        )


def _stop(worker: WorkerProcess, reader: Reader) -> str:
    """Let the last results arrive and stop the worker with SIGTERM, which it must obey with exit code
    0; return its log on one line."""
    try:
        worker.alive()
        reader.settle(1.0)
    finally:
        code = worker.terminate()
    log = " ".join(worker.text().split())
    assert code == 0, log[-3000:]
    return log


@pytest.mark.timeout(120)
@pytest.mark.parametrize("slot", [True, False], ids=["crash-slot", "no-slot"])
def test_a_record_that_kills_its_worker_is_quarantined_and_the_pipeline_goes_on(
    kafka_settings: KafkaSettings, new_topic: NewTopic, tmp_path: Path, slot: bool
) -> None:
    """With the crash slot kept across restarts: two deaths, each pinned on the record. Without it
    (a fresh directory each time, as when the worker comes back on another host): one death that only
    narrows the culprit to the lease's range, then two pinned by the serial replay's markers."""
    settings = quick(kafka_settings)
    source, sink, dlq = new_topic(partitions=1), new_topic(partitions=1), new_topic(partitions=1)
    module = _module(tmp_path, CRASH, source, sink, dlq)
    name = group()
    with reading(settings, [sink, dlq]) as reader:
        produce_with_headers(settings, source, _records())
        worker, codes = _run_with_restarts(
            module,
            settings,
            name,
            tmp_path / "worker.log",
            reader,
            done=lambda got: len(got[dlq]) >= 1 and _all_but_poison(got[sink]),
            timeout=100,
            crash_dir=lambda n: tmp_path / ("crash" if slot else f"crash-{n}"),
        )
        try:
            # The worker runs on: records produced after the quarantine are processed too.
            produce_with_headers(
                settings, source, [(None, json.dumps({"n": 100 + n}).encode(), 0, []) for n in range(5)]
            )
            reader.wait_for(
                lambda got: {100, 104} <= set(_results(reader, sink)), timeout=30, what="later records"
            )
            worker.alive()
            reader.settle(1.0)
            exposition = worker.scrape()
        finally:
            code = worker.terminate()
    log = " ".join(worker.text().split())
    assert code == 0, log[-3000:]
    # Counted by the worker that quarantined it.
    assert f'cadenza_records_quarantined_total{{topic="{source}"}} 1.0' in exposition, exposition
    quarantined = [
        line for line in exposition.splitlines() if line.startswith("cadenza_records_dead_lettered_total{")
    ]
    assert len(quarantined) == 1 and 'reason="quarantined"' in quarantined[0], quarantined
    assert quarantined[0].endswith(" 1.0"), quarantined
    # The rule: two deaths pinned on the record, then quarantined; without the slot, one more death
    # that only narrowed the culprit to a range.
    assert codes == ([137, 137] if slot else [137, 137, 137]), codes
    [letter] = reader.records[dlq]
    assert letter.header(DISPOSITION_HEADER) == "quarantined"
    assert letter.header("cadenza-error-type") == "Quarantined"
    assert "2 times in a row" in letter.header("cadenza-error")
    assert int(letter.header(SOURCE_OFFSET_HEADER)) == POISON
    assert letter.key == f"k{POISON}".encode() and json.loads(letter.value or b"") == {"n": POISON}
    assert letter.header("origin") == f"test-{POISON}"  # the original headers are kept
    results = _results(reader, sink)
    assert POISON not in results
    assert set(results) == (set(range(RECORDS)) - {POISON}) | {100 + n for n in range(5)}
    assert "is quarantined" in log
    if slot:
        assert log.count(f"{source}[0]@{POISON} was running (its crash slot says so") == 2, log[-4000:]
        assert "run alone behind markers" not in log  # no serial replay of the range
    else:
        assert "crash slot says" not in log and "run alone behind markers" in log


LONG = 3000
EARLY_POISON = 5


@pytest.mark.timeout(180)
def test_without_a_slot_a_poison_record_in_a_long_range_is_found_through_a_chunk_in_four_deaths(
    kafka_settings: KafkaSettings, new_topic: NewTopic, tmp_path: Path
) -> None:
    """3,000 records fetched before the fifth kills the worker: the lease covers thousands of them, so
    the serial replay runs in chunks (one marker per ``ceil(sqrt(range))`` records, not one per
    record). Deaths: the first narrows the culprit to the range, the second to its chunk, the third
    and fourth are pinned on the record, then it is quarantined; every other record runs once the
    replay ends."""
    settings = quick(kafka_settings)
    source, sink, dlq = new_topic(partitions=1), new_topic(partitions=1), new_topic(partitions=1)
    module = tmp_path / "poison.py"
    module.write_text(
        MODULE.format(
            poison=EARLY_POISON, action=CRASH, suffix=tmp_path.name[-8:], source=source, sink=sink, dlq=dlq
        )
    )
    everything_else = set(range(LONG)) - {EARLY_POISON}
    with reading(settings, [sink, dlq]) as reader:
        produce_with_headers(
            settings, source, [(None, json.dumps({"n": n}).encode(), 0, []) for n in range(LONG)]
        )
        worker, codes = _run_with_restarts(
            module,
            settings,
            group(),
            tmp_path / "worker.log",
            reader,
            done=lambda got: (
                len(got[dlq]) >= 1 and everything_else <= {json.loads(r.value or b"")["n"] for r in got[sink]}
            ),
            timeout=160,
            crash_dir=lambda n: tmp_path / f"crash-{n}",
        )
        log = _stop(worker, reader)
    assert codes == [137] * 4, codes
    # The second death named a chunk that holds the poison record.
    [chunk] = re.findall(
        rf"{re.escape(source)}\[0\]: its previous owner \(\S+\) died or was declared "
        r"lost while one of offsets (\d+)-(\d+) was running",
        log,
    )
    first, last = int(chunk[0]), int(chunk[1])
    # Chunks are sized for the records that exist (the range cut at the partition's end, LONG), not
    # for the lease, which a fast first fetch stretches far past them.
    assert first <= EARLY_POISON < last and 1 < last - first + 1 <= math.isqrt(LONG - 1) + 1, chunk
    # The first death's range is its lease (the fetch rate's second: 107,020-149,881 in runs seen); cut
    # at LONG whenever it promised more.
    [lease] = re.findall(rf"{re.escape(source)}\[0\] below offset (\d+)", log)
    assert int(lease) <= LONG or f"{source}[0]: the suspect range ends at offset {LONG}," in log, log[-4000:]
    assert f"while offset {EARLY_POISON} was running (death 1 of that record" in log, log[-4000:]
    assert f"while offset {EARLY_POISON} was running (death 2 of that record" in log, log[-4000:]
    [letter] = reader.records[dlq]
    assert int(letter.header(SOURCE_OFFSET_HEADER)) == EARLY_POISON
    assert set(_results(reader, sink)) == everything_else


@pytest.mark.timeout(150)
def test_a_record_that_hangs_past_the_poll_interval_is_quarantined(
    kafka_settings: KafkaSettings, new_topic: NewTopic, tmp_path: Path
) -> None:
    settings = quick(kafka_settings)
    source, sink, dlq = new_topic(partitions=1), new_topic(partitions=1), new_topic(partitions=1)
    module = _module(tmp_path, HANG.format(seconds=7), source, sink, dlq)
    name = group()
    with reading(settings, [sink, dlq]) as reader:
        produce_with_headers(settings, source, _records())
        worker, codes = _run_with_restarts(
            module,
            settings,
            name,
            tmp_path / "worker.log",
            reader,
            "--max-poll-interval",
            "4",
            "--hang-timeout",
            "1.5",
            done=lambda got: len(got[dlq]) >= 1 and _all_but_poison(got[sink]),
            timeout=130,
            crash_dir=lambda n: tmp_path / "crash",
        )
        log = _stop(worker, reader)
    assert codes == [], codes  # the process never died: the worker restarted in place
    assert log.count("a user function has run for more than 1.5 s") >= 2, log[-4000:]
    assert log.count("ran past max.poll.interval.ms") >= 2, log[-4000:]
    [letter] = reader.records[dlq]
    assert letter.header(DISPOSITION_HEADER) == "quarantined"
    assert int(letter.header(SOURCE_OFFSET_HEADER)) == POISON
    # A hung call that returns after its worker was declared lost may have produced its result: the
    # record did run to its end once. Every other record's result is there.
    assert set(_results(reader, sink)) - {POISON} == set(range(RECORDS)) - {POISON}


@pytest.mark.timeout(150)
def test_clean_stops_and_a_record_that_dies_then_passes_quarantine_nothing(
    kafka_settings: KafkaSettings, new_topic: NewTopic, tmp_path: Path
) -> None:
    settings = quick(kafka_settings)
    source, sink, dlq = new_topic(partitions=1), new_topic(partitions=1), new_topic(partitions=1)
    # Dies once on the record (pinned on it by the crash slot), then passes on its retry.
    module = _module(tmp_path, FLAKY.format(path=str(tmp_path / "seen"), times=1), source, sink, dlq)
    name = group()
    log = tmp_path / "worker.log"
    crash = tmp_path / "crash"
    with reading(settings, [sink, dlq]) as reader:
        # Clean stops and starts first: nothing suspect, nothing quarantined.
        first: list[Headed] = [(None, json.dumps({"n": 1000 + n}).encode(), 0, []) for n in range(10)]
        for round_ in range(2):
            worker = WorkerProcess(module, settings, name, log, "--crash-dir", str(crash), env=WIDE)
            produce_with_headers(settings, source, first[5 * round_ : 5 * round_ + 5])
            reader.wait_for(_at_least(sink, 5 * round_ + 5), timeout=45, what="clean round")
            assert worker.terminate() == 0
        assert "behind marker" not in worker.text() and "behind a marker" not in worker.text()
        produce_with_headers(settings, source, _records())
        worker, codes = _run_with_restarts(
            module,
            settings,
            name,
            log,
            reader,
            done=lambda got: set(range(RECORDS)) <= {json.loads(r.value or b"")["n"] for r in got[sink]},
            timeout=120,
            crash_dir=lambda n: crash,
        )
        try:
            worker.alive()
            reader.settle(2.0)
        finally:
            code = worker.terminate()
    assert code == 0
    assert codes == [137], codes
    assert reader.records[dlq] == []  # died at one pinned death only: not quarantined
    text = " ".join(worker.text().split())
    assert f"{source}[0]@{len(first) + POISON} was running (its crash slot says so" in text, text[-4000:]
    results = _results(reader, sink)
    assert set(results) == set(range(RECORDS)) | {1000 + n for n in range(10)}
    assert "is quarantined" not in worker.text()
