"""Issue 8, item 1: poison records mixed into good ones. Every good record is processed; every bad one is
in the dead-letter topic with error type, message, operator and original coordinates; counts exact.

One pipeline with a repartition (source -> map -> key_by | repartition topic -> map -> sink), so both
decoders and both producing steps are exercised. Poison on the source topic: bytes that are not JSON,
JSON that is not a ``Payment`` (wrong type, missing field, wrong shape), a tombstone, and two values
over the producer's size limit (``message.max.bytes``, librdkafka's default 1,000,000 bytes, which the
worker keeps): one that does not decode, one that decodes but whose repartition record is too large.
A third record is small but its result is too large for the sink. Poison written straight onto the
repartition topic (by "another producer"): values cadenza did not write, a pickle, a record without
its origin header. Finally repartition records with garbled ``cadenza-ctx`` headers: those still run,
with a fresh scheduling context, the garbled-context counter goes up, and each is also copied to the
dead-letter topic as a notice (``ContextHeaderError``, disposition ``processed-with-fresh-context``);
every other dead letter says ``not-processed``.

Size limits, set on purpose: the test's producer and the source topic allow 3 MiB records
(``message.max.bytes`` and the topic's ``max.message.bytes``), so an oversized value exists on the
topic; the worker's producer keeps the 1,000,000-byte default, so the oversized values cannot be copied
whole into the dead-letter topic: their dead letters omit the value and say how large it was.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from pydantic import BaseModel

from cadenza.pipelines import Pipeline
from cadenza.scheduling.context import CONTEXT_HEADER, SchedulingContext, decode_context, encode_context
from cadenza.schemas import ERROR_HEADER, ERROR_TYPE_HEADER
from cadenza.settings import KafkaSettings
from cadenza.state import encode_key
from cadenza.testing.pytest_plugin import NewTopic
from cadenza.worker import Worker
from cadenza.worker.config import WorkerConfig
from cadenza.worker.engine.dead_letter import (
    CONTEXT_HEADER_ERROR,
    DISPOSITION_HEADER,
    NOT_PROCESSED,
    OPERATOR_HEADER,
    PROCESSED_WITH_FRESH_CONTEXT,
    SOURCE_OFFSET_HEADER,
    SOURCE_PARTITION_HEADER,
    SOURCE_TOPIC_HEADER,
    VALUE_OMITTED_HEADER,
)
from cadenza.worker.engine.output import Output, RecordTooLargeError, too_large
from cadenza.worker.engine.wire import ORIGIN_HEADER, decode_record_value, encode_record_value, pack_origin
from tests.reliability._support import Headed, group, produce_with_headers, quick
from tests.worker.kafka_io import reading, running

BIG = 1_500_000  # over the worker producer's 1,000,000-byte message.max.bytes, under the topic's 3 MiB
ROOM = {"message.max.bytes": 3 * 1024 * 1024}
PARTITIONS = 2
GOOD = 60


class Payment(BaseModel):
    id: int
    account: str
    amount: float
    note: str = ""
    copies: int = 1


def enrich(payment: Payment) -> dict[str, Any]:
    return {
        "id": payment.id,
        "account": payment.account,
        "net": payment.amount * 0.9,
        "note": payment.note,
        "copies": payment.copies,
    }


def account_of(row: dict[str, Any]) -> str:
    return str(row["account"])


def render(row: dict[str, Any]) -> dict[str, Any]:
    # copies > 1 makes a result larger than the record that caused it (the sink refuses it).
    return {"id": row["id"], "net": row["net"], "echo": row["note"] * row["copies"]}


def payment(i: int, **extra: Any) -> bytes:
    return json.dumps({"id": i, "account": f"acct-{i % 7}", "amount": float(i), **extra}).encode()


def repartition_value(i: int) -> bytes:
    return encode_record_value({"id": i, "account": "acct-x", "net": 1.0, "note": "", "copies": 1})


@pytest.mark.kafka
@pytest.mark.timeout(90)
def test_poison_records_are_dead_lettered_exactly_and_good_records_all_processed(
    kafka_settings: KafkaSettings, new_topic: NewTopic
) -> None:
    settings = quick(kafka_settings)
    source = new_topic(partitions=PARTITIONS, configs={"max.message.bytes": str(ROOM["message.max.bytes"])})
    sink = new_topic(partitions=PARTITIONS)
    name = f"poison-{uuid.uuid4().hex[:6]}"
    pipeline = Pipeline(name, tenant="bank", latency_target="1s")
    pipeline.source(source, value=Payment).map(enrich).key_by(account_of).map(render).sink(sink)
    worker = Worker([pipeline], settings, WorkerConfig(group=group(), partitions=PARTITIONS))
    graph = worker.graphs[0]
    source_step = next(n.id for n in graph.nodes if n.kind == "source")
    key_by = next(n for n in graph.nodes if n.kind == "key_by")
    sink_step = next(n.id for n in graph.nodes if n.kind == "sink")
    repartition = key_by.repartition_topic
    assert repartition is not None

    # -- the source topic: good records with poison mixed in ------------------------------------------
    poison: list[tuple[bytes | None, str, str, bool]] = [
        # (value, expected error type, failing step, value too large to copy into the dead letter)
        (b"\xff\xfe\x00 not JSON at all", "ValidationError", source_step, False),
        (b'{"id": "seven", "account": "a", "amount": 1}', "ValidationError", source_step, False),
        (b'{"id": 8, "account": "a"}', "ValidationError", source_step, False),
        (b"[1, 2, 3]", "ValidationError", source_step, False),
        (None, "NoValue", source_step, False),
        (b"\xff" * BIG, "ValidationError", source_step, True),
        (payment(9001, note="n" * BIG), "RecordTooLarge", key_by.id, True),
    ]
    # Small, valid and through the repartition; its result is too large for the sink, so its dead letter
    # is the repartition record the sink's sub-topology consumed (coordinates known only at the end).
    too_large_result = payment(9002, note="e" * 1000, copies=BIG // 1000)
    outgoing: list[Headed] = []
    expected_dead: list[tuple[int, str, str, bool, bytes | None]] = []  # index into outgoing, ...
    for i in range(GOOD):
        outgoing.append((f"k{i}".encode(), payment(i), i % PARTITIONS, []))
        if i % 7 == 3 and poison:
            value, error_type, step, omitted = poison.pop(0)
            expected_dead.append((len(outgoing), error_type, step, omitted, value))
            outgoing.append((b"poison", value, i % PARTITIONS, [("origin", b"test")]))
        if i == GOOD // 2:
            outgoing.append((b"echo", too_large_result, i % PARTITIONS, []))
    assert not poison, "every poison kind is mixed in"
    offsets = produce_with_headers(settings, source, outgoing, **ROOM)
    dead_by_coordinates: dict[tuple[str, int, int], tuple[str, str, bool, bytes | None, bytes | None]] = {
        (source, outgoing[n][2], offsets[n]): (error_type, step, omitted, outgoing[n][1], outgoing[n][0])
        for n, error_type, step, omitted, _ in expected_dead
    }

    # -- the repartition topic, written by "someone else" -----------------------------------------------
    valid_ctx = encode_context(SchedulingContext(name, "bank", 1.0, 1.0, 0.0, 0.0, 1, 7))
    garbled = [b"", b"\x00", b"definitely not a context", valid_ctx[:-3], valid_ctx + b"\x00"]
    assert all(decode_context(raw) is None for raw in garbled)  # each really is garbled
    origin = pack_origin(0, 10**9, 0, 0.0)
    foreign: list[tuple[Headed, str]] = [  # (record, error type of its dead letter)
        ((b"sacct-x", b"definitely not cadenza", 0, [(ORIGIN_HEADER, origin)]), "UnknownFormat"),
        ((b"sacct-x", b"p\x80\x04K\x01.", 1, [(ORIGIN_HEADER, origin)]), "PickleRefused"),
        ((b"sacct-x", repartition_value(7001), 0, []), "NoOrigin"),
    ]
    for n, raw in enumerate(garbled):
        headers: list[tuple[str, str | bytes | None]] = [
            (ORIGIN_HEADER, pack_origin(n % PARTITIONS, 10**9 + n, 0, 0.0)),
            (CONTEXT_HEADER, raw),
        ]
        foreign.append(
            (
                (encode_key("acct-x"), repartition_value(8000 + n), n % PARTITIONS, headers),
                CONTEXT_HEADER_ERROR,
            )
        )
    garbled_ids = {8000 + n for n in range(len(garbled))}
    notices: dict[tuple[str, int, int], bytes] = {}  # coordinates of a garbled record -> its header

    good_ids = {i for i in range(GOOD)}
    dead_letters = graph.dead_letter_topic
    with running(worker, join_timeout=30), reading(settings, [sink, dead_letters]) as reader:
        foreign_offsets = produce_with_headers(settings, repartition, [record for record, _ in foreign])
        for (sent, failure), offset in zip(foreign, foreign_offsets, strict=True):
            # The repartition topic's reader starts at the key_by step: its operator in dead letters.
            dead_by_coordinates[(repartition, sent[2], offset)] = (
                failure,
                key_by.id,
                False,
                sent[1],
                sent[0],
            )
            if failure == CONTEXT_HEADER_ERROR:
                header = dict(sent[3])[CONTEXT_HEADER]
                assert isinstance(header, bytes)
                notices[(repartition, sent[2], offset)] = header
        assert len(notices) == len(garbled)
        want_sink, want_dead = len(good_ids) + len(garbled_ids), len(dead_by_coordinates) + 1
        reader.wait_for(
            lambda got: len(got[sink]) >= want_sink and len(got[dead_letters]) >= want_dead,
            timeout=45,
            what=f"{want_sink} results and {want_dead} dead letters",
        )
        reader.settle(1.0)  # nothing more may arrive
        scraped = worker.exporter.render().decode()

    # Every good record processed exactly once (no crash, so no replay), and nothing else.
    results = [json.loads(r.value or b"") for r in reader.records[sink]]
    assert sorted(r["id"] for r in results) == sorted(good_ids | garbled_ids)
    # Garbled contexts were replaced by fresh ones at the repartition reader: one hop to the sink
    # instead of the two a context stamped at the source has.
    hops = {
        json.loads(r.value or b"")["id"]: ctx.hops
        for r in reader.records[sink]
        if (ctx := decode_context(r.headers.get(CONTEXT_HEADER))) is not None
    }
    assert len(hops) == want_sink
    assert {hops[i] for i in garbled_ids} == {1} and {hops[i] for i in good_ids} == {2}

    # Every bad record in the dead-letter topic once, with what went wrong and where it came from.
    seen: set[tuple[str, int, int]] = set()
    refused_results = []
    for record in reader.records[dead_letters]:
        coordinates = (
            record.header(SOURCE_TOPIC_HEADER),
            int(record.header(SOURCE_PARTITION_HEADER)),
            int(record.header(SOURCE_OFFSET_HEADER)),
        )
        if coordinates[0] == repartition and record.header(OPERATOR_HEADER) == sink_step:
            refused_results.append(record)
            assert record.header(ERROR_TYPE_HEADER) == "RecordTooLarge"
            assert "message.max.bytes" in record.header(ERROR_HEADER)
            assert decode_record_value(record.value or b"")["id"] == 9002  # the consumed record
            assert record.key == encode_key("acct-0")
            assert record.headers[DISPOSITION_HEADER] == NOT_PROCESSED
            continue
        assert coordinates in dead_by_coordinates, f"unexpected dead letter {coordinates}"
        assert coordinates not in seen, f"dead-lettered twice: {coordinates}"
        seen.add(coordinates)
        error_type, step, omitted, value, key = dead_by_coordinates[coordinates]
        assert record.header(ERROR_TYPE_HEADER) == error_type, coordinates
        assert record.header(OPERATOR_HEADER) == step, coordinates
        assert record.header(ERROR_HEADER), coordinates  # a message saying what went wrong
        assert record.key == key
        if coordinates in notices:  # processed (the sink has its result), and noticed
            assert record.headers[DISPOSITION_HEADER] == PROCESSED_WITH_FRESH_CONTEXT, coordinates
            raw = notices[coordinates]
            assert f"{CONTEXT_HEADER} header ({len(raw)} bytes) is garbled" in record.header(ERROR_HEADER)
            assert (record.headers.get(CONTEXT_HEADER) or b"") == raw  # the garbage, for inspection
            assert decode_record_value(record.value or b"")["id"] in garbled_ids
        else:
            assert record.headers[DISPOSITION_HEADER] == NOT_PROCESSED, coordinates
        if omitted:
            assert record.value is None
            assert int(record.header(VALUE_OMITTED_HEADER)) == len(value or b"")
        else:
            assert record.value == value  # the consumed record, unchanged
            assert VALUE_OMITTED_HEADER not in record.headers
            if coordinates[0] == source:
                assert record.headers.get("origin") == b"test"  # original headers kept
    assert seen == set(dead_by_coordinates)
    assert len(refused_results) == 1

    # Counts, as the worker and Prometheus report them.
    counters = worker.counters
    refusals = 1 + sum(1 for error_type, *_ in dead_by_coordinates.values() if error_type == "RecordTooLarge")
    # Notices are not failures: only Prometheus counts them among dead letters (reason "context").
    assert counters.dead_letter_decode == len(dead_by_coordinates) + 1 - refusals - len(notices)
    assert counters.dead_letter_function == refusals == 2
    # Source records, foreign repartition records, and what key_by wrote (the good ones and 9002).
    assert counters.consumed == len(outgoing) + len(foreign) + len(good_ids) + 1
    by_step: dict[tuple[str, str], int] = {}
    for error_type, step, *_ in dead_by_coordinates.values():
        reason = {"RecordTooLarge": "function", CONTEXT_HEADER_ERROR: "context"}.get(error_type, "decode")
        by_step[(step, reason)] = by_step.get((step, reason), 0) + 1
    by_step[(sink_step, "function")] = 1
    exported = {
        (m.labels[2], reason): n for m in worker.exporter.operators() for reason, n in m.dead_lettered.items()
    }
    assert exported == by_step
    assert by_step[(key_by.id, "context")] == len(garbled)
    dead_lines = [
        line for line in scraped.splitlines() if line.startswith("cadenza_records_dead_lettered_total{")
    ]
    assert sum(float(line.rsplit(" ", 1)[1]) for line in dead_lines) == want_dead
    garbled_counted = sum(m.context_garbled for m in worker.exporter.operators())
    assert garbled_counted == len(garbled)
    garbled_lines = [
        line for line in scraped.splitlines() if line.startswith("cadenza_context_headers_garbled_total{")
    ]
    assert sum(float(line.rsplit(" ", 1)[1]) for line in garbled_lines) == len(garbled)


def test_only_a_size_refusal_becomes_a_dead_letter() -> None:
    """The producer refuses an oversized record in ``produce()``; that, and only that, is the record's
    fault. Any other refusal is the client's and must stop the worker rather than dead-letter input."""
    output = Output(KafkaSettings.load(bootstrap_servers="127.0.0.1:9"), **{"message.max.bytes": 10_000})
    output.produce("t", b"x" * 5_000, None)  # under the limit: queued
    with pytest.raises(RecordTooLargeError, match=r"message\.max\.bytes"):
        output.produce("t", b"x" * 20_000, b"k")
    refused = KafkaException(KafkaError(KafkaError._QUEUE_FULL))
    with pytest.raises(KafkaException):
        too_large(refused, "t", b"x", None)
    assert RecordTooLargeError.error_type == "RecordTooLarge"
