"""Which Kafka clients the test broker (the embedded Tansu broker here) serves: one test per client.

Each client produces a few keyed records with headers, reads them back in a consumer group and
commits, and cadenza's own reader (confluent-kafka) sees the same keys, values and headers, so the
records are right on the wire and not just within one client. A client library that is not
installed is skipped with the reason. faust-streaming pins versions that clash with cadenza's, so it
is not in the ``dev`` extra: its test uses the benchmarks' faust venv when one was built
(``python benchmarks/scenarios/peers/venvs.py faust``) and skips otherwise. Debian 12's ``kcat``
(librdkafka 2.0.2) is not here: it fails its first request against the embedded broker (see
docs/how-to/embedded-broker.md).
"""

from __future__ import annotations

import asyncio
import importlib.util
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable
from pathlib import Path

import pytest
from confluent_kafka import Consumer

from cadenza.infra.broker.embedded import free_port
from cadenza.infra.kafka.clients import DeliveryReport, flush_or_raise, make_producer
from cadenza.settings import KafkaSettings
from cadenza.testing.pytest_plugin import NewTopic
from tests.worker.kafka_io import Record, reading

pytestmark = [
    pytest.mark.kafka,
    # kafka-python 3.0 loads its protocol schemas through importlib.resources' legacy API.
    pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning"),
]

Headers = list[tuple[str, str | bytes | None]]
Sent = tuple[bytes | None, bytes | None, tuple[tuple[str, object], ...]]

#: (key, value, headers) of the records every client sends.
RECORDS: list[tuple[bytes, bytes, Headers]] = [
    (f"k{i}".encode(), f'{{"n": {i}}}'.encode(), [("trace-id", f"t-{i}".encode()), ("origin", b"client")])
    for i in range(5)
]
SESSION_TIMEOUT_MS = 6000  # the embedded broker joins a group in about half the session timeout
TIMEOUT = 60.0


def _needs(module: str) -> None:
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed (it is in the dev extra: pip install -e '.[dev]')")


def _as_sent(key: bytes | None, value: bytes | None, headers: Iterable[tuple[str, object]]) -> Sent:
    return key, value, tuple(headers)


def _read_by_cadenza(settings: KafkaSettings, topic: str) -> list[Sent]:
    """What cadenza's confluent-kafka reader finds on ``topic``: (key, value, headers) in offset order."""
    with reading(settings, [topic]) as reader:
        reader.wait_for(lambda got: len(got[topic]) >= len(RECORDS), TIMEOUT, f"{len(RECORDS)} records")
        records: list[Record] = sorted(reader.records[topic], key=lambda r: r.offset)
    return [
        _as_sent(r.key, r.value, [(k, v) for k, v in r.headers.items() if v is not None]) for r in records
    ]


def _expected() -> list[Sent]:
    return [_as_sent(*record) for record in RECORDS]


def test_confluent_kafka(kafka_settings: KafkaSettings, new_topic: NewTopic) -> None:
    topic = new_topic()
    producer, errors = make_producer(kafka_settings)
    report = DeliveryReport()
    for key, value, headers in RECORDS:
        producer.produce(topic, value, key, headers=headers, on_delivery=report)
    flush_or_raise(producer, report, timeout=30)
    errors.raise_fatal()
    consumer = Consumer(
        {
            "bootstrap.servers": kafka_settings.bootstrap_servers,
            "group.id": f"clients-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": SESSION_TIMEOUT_MS,
        }
    )
    got: list[Sent] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + TIMEOUT
        while len(got) < len(RECORDS) and time.monotonic() < deadline:
            for message in consumer.consume(10, 0.5):
                assert message.error() is None, message.error()
                received = message.headers() or []
                assert not isinstance(received, dict)
                got.append(_as_sent(message.key(), message.value(), received))
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    assert got == _expected()
    assert _read_by_cadenza(kafka_settings, topic) == _expected()


def test_kafka_python(kafka_settings: KafkaSettings, new_topic: NewTopic) -> None:
    _needs("kafka")
    from kafka import KafkaConsumer, KafkaProducer  # noqa: PLC0415 - optional in this test's sense

    topic = new_topic()
    producer = KafkaProducer(bootstrap_servers=kafka_settings.bootstrap_servers)
    try:
        for key, value, headers in RECORDS:
            producer.send(topic, value=value, key=key, headers=headers).get(timeout=30)
        producer.flush(30)
    finally:
        producer.close(10)
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=kafka_settings.bootstrap_servers,
        group_id=f"clients-{uuid.uuid4().hex[:8]}",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=SESSION_TIMEOUT_MS,
        heartbeat_interval_ms=1000,
    )
    got: list[Sent] = []
    try:
        deadline = time.monotonic() + TIMEOUT
        while len(got) < len(RECORDS) and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500).values():
                got.extend(_as_sent(m.key, m.value, list(m.headers)) for m in batch)
        consumer.commit()
    finally:
        consumer.close()
    assert got == _expected()
    assert _read_by_cadenza(kafka_settings, topic) == _expected()


def test_aiokafka(kafka_settings: KafkaSettings, new_topic: NewTopic) -> None:
    _needs("aiokafka")
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer  # noqa: PLC0415

    topic = new_topic()

    async def round_trip() -> list[Sent]:
        producer = AIOKafkaProducer(bootstrap_servers=kafka_settings.bootstrap_servers)
        await producer.start()
        try:
            for key, value, headers in RECORDS:
                await producer.send_and_wait(topic, value=value, key=key, headers=headers)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            topic,
            bootstrap_servers=kafka_settings.bootstrap_servers,
            group_id=f"clients-{uuid.uuid4().hex[:8]}",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=SESSION_TIMEOUT_MS,
            heartbeat_interval_ms=1000,
        )
        await consumer.start()
        got: list[Sent] = []
        try:
            deadline = time.monotonic() + TIMEOUT
            while len(got) < len(RECORDS) and time.monotonic() < deadline:
                for batch in (await consumer.getmany(timeout_ms=500)).values():
                    got.extend(_as_sent(m.key, m.value, list(m.headers)) for m in batch)
            await consumer.commit()
        finally:
            await consumer.stop()
        return got

    assert asyncio.run(round_trip()) == _expected()
    assert _read_by_cadenza(kafka_settings, topic) == _expected()


FAUST_APP = """
import sys
import faust

bootstrap, app_id, source, sink, web_port = sys.argv[1:6]
app = faust.App(
    app_id,
    broker=f"kafka://{bootstrap}",
    store="memory://",
    web_enabled=False,
    consumer_auto_offset_reset="earliest",
    broker_session_timeout=6.0,
    broker_heartbeat_interval=1.0,
    topic_partitions=1,
    topic_disable_leader=True,
)
raw = {"key_type": bytes, "value_type": bytes, "key_serializer": "raw", "value_serializer": "raw"}
source_topic = app.topic(source, **raw)
sink_topic = app.topic(sink, **raw)


@app.agent(source_topic)
async def forward(stream):
    async for event in stream.events():
        await sink_topic.send(key=event.key, value=event.value, headers=list(event.headers.items()))


# faust's worker command serves its web port whatever web_enabled says: a port of its own, so that
# another faust process on the machine (a benchmark) does not make this one fail to start.
sys.argv = [sys.argv[0], "worker", "-l", "warn", "--web-port", web_port]
app.main()
"""


def _faust_python() -> Path:
    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks" / "scenarios"))
    try:
        from peers.venvs import FAUST, default_cache_dir, is_current, venv_python  # noqa: PLC0415
    finally:
        sys.path.pop(0)
    venv = default_cache_dir() / FAUST.name
    if not is_current(venv, FAUST):
        pytest.skip(
            f"no faust-streaming venv at {venv} (faust's pins clash with cadenza's, so it is not in the "
            "dev extra); build it with: python benchmarks/scenarios/peers/venvs.py faust"
        )
    return Path(venv_python(venv))


def test_faust_streaming(kafka_settings: KafkaSettings, new_topic: NewTopic, tmp_path: Path) -> None:
    python = _faust_python()
    source, sink = new_topic(suffix="in"), new_topic(suffix="out")
    app = tmp_path / "forward_app.py"
    app.write_text(FAUST_APP)
    log = (tmp_path / "faust.log").open("wb")
    process = subprocess.Popen(
        [
            str(python),
            str(app),
            kafka_settings.bootstrap_servers,
            f"clients-{uuid.uuid4().hex[:8]}",
            source,
            sink,
            str(free_port()),
        ],
        cwd=tmp_path,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        producer, errors = make_producer(kafka_settings)
        report = DeliveryReport()
        for key, value, headers in RECORDS:
            producer.produce(source, value, key, headers=headers, on_delivery=report)
        flush_or_raise(producer, report, timeout=30)
        errors.raise_fatal()
        try:
            got = _read_by_cadenza(kafka_settings, sink)
        except AssertionError:
            raise AssertionError((tmp_path / "faust.log").read_text()[-3000:]) from None
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
        log.close()
    assert got == _expected()
