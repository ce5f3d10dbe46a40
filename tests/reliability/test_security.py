"""Issue 8, item 7: security settings reach every client; credentials never leak.

Reaching every client is shown in two steps: (1) no module of cadenza builds a Kafka client except the
three factories of :mod:`cadenza.infra.kafka.clients` (checked on the source, so a new client added
later without the factories fails here), and (2) every client the factories and the components built
on them make (the worker's producer, the span emitter, the restore and feedback consumers, the Spark
source and sink) is given the full SASL/SSL configuration: the configs are recorded as the real
confluent-kafka clients are constructed.

Leaking is checked where a secret could surface: reprs, validation errors, the Spark connection
description, the Spark source and sink failing to reach a broker (their logs, librdkafka's debug
lines included, and their errors), and, against the real broker, a running worker's log lines
(DEBUG, librdkafka included), its Prometheus exposition and its dead letters, and a ``cadenza
worker`` process whose SASL connection fails (its stderr and exit message). A running worker's
planted secret is the Schema Registry password: the test broker speaks PLAINTEXT only, so a worker
given a SASL password cannot run against it.
"""

from __future__ import annotations

import ast
import json
import logging
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient
from pydantic import BaseModel

from cadenza.errors import CadenzaError, ConfigError
from cadenza.feedback.consumer import FeedbackConsumer
from cadenza.infra.kafka import clients
from cadenza.infra.metrics.emitter import SpanEmitter
from cadenza.pipelines import Pipeline
from cadenza.settings import KafkaSettings
from cadenza.testing.pytest_plugin import NewTopic
from cadenza.worker import Worker
from cadenza.worker.config import WorkerConfig
from cadenza.worker.engine.output import Output
from tests.reliability._support import ROOT, group
from tests.worker.kafka_io import produce, reading, running

SECRET = "pl4nted-Secret-" + uuid.uuid4().hex[:8]
KEY_SECRET = "key-Secret-" + uuid.uuid4().hex[:8]
CLIENT_CLASSES = {"Producer", "Consumer", "AdminClient", "SerializingProducer", "DeserializingConsumer"}
SECURITY_KEYS = ("security.protocol", "sasl.mechanism", "sasl.username", "sasl.password", "ssl.key.password")


class Row(BaseModel):
    a: int


def secured(
    bootstrap_servers: str = "broker-a.invalid:9093", security_protocol: str = "SASL_SSL"
) -> KafkaSettings:
    # No SSL files here: constructing a client loads them, and these tests build real clients. The
    # file settings are checked on the config dicts below.
    return KafkaSettings.load(
        bootstrap_servers=bootstrap_servers,
        security_protocol=security_protocol,
        sasl_mechanism="SCRAM-SHA-512",
        sasl_username="svc-cadenza",
        sasl_password=SECRET,
        ssl_key_password=KEY_SECRET,
    )


def test_only_the_client_factories_construct_kafka_clients() -> None:
    package = ROOT / "cadenza"
    constructed: dict[str, set[str]] = {}
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                func = node.func
                name = (
                    func.id
                    if isinstance(func, ast.Name)
                    else func.attr
                    if isinstance(func, ast.Attribute)
                    else ""
                )
                if name in CLIENT_CLASSES:
                    constructed.setdefault(str(path.relative_to(ROOT)), set()).add(name)
    assert constructed == {"cadenza/infra/kafka/clients.py": {"Producer", "Consumer", "AdminClient"}}, (
        "a Kafka client built outside the factories would miss the security settings"
    )


class _Recorder:
    def __init__(self) -> None:
        self.configs: list[tuple[str, dict[str, Any]]] = []


def test_every_client_gets_the_security_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    recorder = _Recorder()

    class RecordingProducer(Producer):
        def __init__(self, config: dict[str, Any]) -> None:
            recorder.configs.append(("producer", dict(config)))
            super().__init__(config)

    class RecordingConsumer(Consumer):
        def __init__(self, config: dict[str, Any]) -> None:
            recorder.configs.append(("consumer", dict(config)))
            super().__init__(config)

    class RecordingAdmin(AdminClient):
        def __init__(self, config: dict[str, Any]) -> None:
            recorder.configs.append(("admin", dict(config)))
            super().__init__(config)

    monkeypatch.setattr(clients, "Producer", RecordingProducer)
    monkeypatch.setattr(clients, "Consumer", RecordingConsumer)
    monkeypatch.setattr(clients, "AdminClient", RecordingAdmin)
    settings = secured()
    expected = {key: settings.client_config()[key] for key in SECURITY_KEYS}
    assert expected["sasl.password"] == SECRET  # the raw value, as librdkafka needs it

    made: list[str] = []
    clients.make_admin(settings)
    made.append("admin")
    Output(settings)  # the worker's one producer (sinks, repartition, changelogs, dead letters)
    made.append("worker output")
    SpanEmitter.to_kafka(settings, "spans", worker_id="w")
    made.append("span emitter")
    feedback = FeedbackConsumer(settings, "feedback")
    with pytest.raises((KafkaException, CadenzaError)):  # the broker does not exist
        feedback.open(timeout=0.5)  # builds its consumer, then fails to find the topic
    made.append("feedback consumer")
    consumer, _ = clients.make_consumer(settings, "g")  # the worker's group and restore consumers
    consumer.close()
    made.append("worker consumer")

    # The Spark source and sink, configured the way cadenza tells users to (kafka_options).
    from cadenza.infra.spark.datasource import kafka_options  # noqa: PLC0415 - imports pyspark
    from cadenza.infra.spark.kafka_sink import _cached_producer  # noqa: PLC0415
    from cadenza.infra.spark.kafka_source import KafkaStreamReader  # noqa: PLC0415
    from cadenza.infra.spark.options import parse_sink_options, parse_source_options  # noqa: PLC0415

    options = kafka_options(settings)
    source_options = parse_source_options({**options, "subscribe": "in"})
    reader = KafkaStreamReader(source_options)
    reader._consumer()  # the driver's metadata consumer; executors build theirs the same way
    reader.stop()
    made.append("spark source")
    _cached_producer(parse_sink_options({**options, "topic": "out"}))
    made.append("spark sink")

    roles = [role for role, _ in recorder.configs]
    assert roles.count("admin") >= 1 and roles.count("producer") >= 3 and roles.count("consumer") >= 3, roles
    for role, config in recorder.configs:
        assert {key: config.get(key) for key in SECURITY_KEYS} == expected, (
            f"a {role} lacks security settings"
        )
    assert len(made) == 7


def test_ssl_files_reach_producer_and_spark_options(tmp_path: Path) -> None:
    ca, cert, key = (tmp_path / n for n in ("ca.pem", "cert.pem", "key.pem"))
    for path in (ca, cert, key):
        path.write_text("not checked here")
    settings = KafkaSettings.load(
        security_protocol="SSL", ssl_ca_location=ca, ssl_certificate_location=cert, ssl_key_location=key
    )
    files = {"ssl.ca.location": str(ca), "ssl.certificate.location": str(cert), "ssl.key.location": str(key)}
    producer, _ = clients.producer_config(settings, **{"linger.ms": 0})
    assert {k: producer[k] for k in files} == files
    from cadenza.infra.spark.datasource import kafka_options  # noqa: PLC0415 - imports pyspark
    from cadenza.infra.spark.options import parse_sink_options, parse_source_options  # noqa: PLC0415

    options = kafka_options(settings)
    for parsed in (parse_source_options({**options, "subscribe": "t"}), parse_sink_options(options)):
        config = parsed.settings.client_config()
        assert {k: config[k] for k in files} == files
        assert config["security.protocol"] == "SSL"


def test_secrets_stay_out_of_reprs_errors_and_descriptions() -> None:
    settings = secured()
    from cadenza.infra.spark.datasource import kafka_options  # noqa: PLC0415 - imports pyspark
    from cadenza.infra.spark.options import describe_connection, parse_source_options  # noqa: PLC0415

    spark = parse_source_options({**kafka_options(settings), "subscribe": "t"})
    texts = [
        repr(settings),
        str(settings),
        repr(spark),
        repr(spark.settings),
        describe_connection(spark.settings),
    ]
    with pytest.raises(ConfigError) as refused:  # a password given with a protocol that cannot use it
        KafkaSettings.load(security_protocol="PLAINTEXT", sasl_username="u", sasl_password=SECRET)
    texts.append(str(refused.value))
    with pytest.raises(ConfigError) as bad_option:
        parse_source_options({**kafka_options(settings), "subscribe": "t", "kafka.security.protocol": "NOPE"})
    texts.append(str(bad_option.value))
    for text in texts:
        assert SECRET not in text and KEY_SECRET not in text, text
    assert "sasl.password=**********" in describe_connection(spark.settings)


@pytest.mark.timeout(60)
def test_the_spark_source_and_sink_failing_to_connect_never_show_the_password(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The Spark data source's Python classes, called directly (no JVM), against a broker that does
    not resolve: the reader's initialOffset()/latestOffset() and the sink's producer creation and
    write fail, and neither their logs (cadenza's and librdkafka's, at DEBUG, with librdkafka's
    ``conf``/``security`` debug contexts on), their errors nor the reprs hold a planted secret."""
    from pyspark.sql import Row  # noqa: PLC0415 - imports pyspark
    from pyspark.sql.streaming.datasource import ReadAllAvailable  # noqa: PLC0415
    from pyspark.sql.types import BinaryType, StructField, StructType  # noqa: PLC0415

    from cadenza.infra.kafka.errors import DeliveryError, KafkaClientError  # noqa: PLC0415
    from cadenza.infra.spark.datasource import kafka_options  # noqa: PLC0415
    from cadenza.infra.spark.kafka_sink import KafkaStreamWriter, sink_columns  # noqa: PLC0415
    from cadenza.infra.spark.kafka_source import KafkaStreamReader  # noqa: PLC0415
    from cadenza.infra.spark.options import parse_sink_options, parse_source_options  # noqa: PLC0415

    settings = secured("broker-a.invalid:9092", "SASL_PLAINTEXT")
    options = {
        **kafka_options(settings),
        "kafka.request.timeout.ms": "2000",  # bounds each metadata request of the source
        "kafka.delivery.timeout.ms": "2000",  # bounds the sink's delivery (its flush waits 5 s more)
        "kafka.debug": "conf,security,broker",  # librdkafka's own debug lines, to Python logging
    }
    assert options["kafka.sasl.password"] == SECRET  # planted, in clear text, as Spark passes it
    caplog.set_level(logging.DEBUG)
    texts: dict[str, str] = {}

    source = parse_source_options({**options, "subscribe": "in"})
    reader = KafkaStreamReader(source)
    try:
        with pytest.raises(KafkaClientError) as initial:
            reader.initialOffset()
        with pytest.raises(KafkaClientError) as latest:
            reader.latestOffset({"in": {"0": 0}}, ReadAllAvailable())
    finally:
        reader.stop()
    sink = parse_sink_options({**options, "topic": "out"})
    writer = KafkaStreamWriter(sink, sink_columns(StructType([StructField("value", BinaryType())]), sink))
    with pytest.raises(DeliveryError) as write:
        writer.write(iter([Row(value=b"x")]))

    for name, failure in (("initialOffset", initial), ("latestOffset", latest), ("write", write)):
        texts[f"{name} error"] = str(failure.value)
        texts[f"{name} error chain"] = repr(failure.value) + repr(failure.value.__cause__)
    texts["reprs"] = " ".join(repr(o) for o in (reader, reader.options, writer, writer.options, sink))
    texts["logs"] = caplog.text
    assert "broker-a.invalid" in texts["initialOffset error"]  # it did fail on the connection
    assert any(r.name.startswith("cadenza.spark") for r in caplog.records)  # the connection line
    assert any(r.name.startswith("cadenza.kafka.librdkafka") for r in caplog.records)  # librdkafka too
    assert "sasl.password=**********" in caplog.text  # the connection line names it, starred
    for where, text in texts.items():
        assert SECRET not in text and KEY_SECRET not in text, f"a planted secret appears in the {where}"


# -- against the broker ------------------------------------------------------------------------------


@pytest.mark.kafka
@pytest.mark.timeout(60)
def test_a_running_worker_never_logs_or_exports_its_credentials(
    kafka_settings: KafkaSettings, new_topic: NewTopic, caplog: pytest.LogCaptureFixture
) -> None:
    # The test broker is PLAINTEXT, so the secret planted in a working setup is the Schema Registry
    # password: it is handed to a registry client at start, and must go nowhere else.
    settings = KafkaSettings.load(
        bootstrap_servers=kafka_settings.bootstrap_servers,
        session_timeout_ms=3000,
        schema_registry_url="http://127.0.0.1:9",
        schema_registry_username="svc",
        schema_registry_password=SECRET,
    )
    registry = settings.schema_registry_config()
    assert registry is not None and SECRET in registry["basic.auth.user.info"]  # really planted
    source, sink = new_topic(), new_topic()
    name = f"secret-{uuid.uuid4().hex[:6]}"
    pipeline = Pipeline(name, tenant="t", latency_target="1s")
    pipeline.source(source, value=Row).map(lambda row: row.a).sink(sink)
    worker = Worker(
        [pipeline], settings, WorkerConfig(group=group(), consumer_overrides={"debug": "cgrp,broker"})
    )
    caplog.set_level(logging.DEBUG)
    produce(settings, source, [(None, b'{"a": 1}', None), (None, b"not json", None)])
    with running(worker), reading(settings, [sink, f"{name}.dlq"]) as reader:
        reader.wait_for(lambda got: len(got[sink]) >= 1 and len(got[f"{name}.dlq"]) >= 1, 30, "both records")
        exposition = worker.exporter.render().decode()
    assert "cadenza_records_processed_total" in exposition
    assert caplog.records, "the worker logged nothing at DEBUG: the check would be empty"
    assert any(r.name.startswith("cadenza.kafka.librdkafka") for r in caplog.records)  # librdkafka too
    dead = reader.records[f"{name}.dlq"][0]
    places = {
        "logs": caplog.text,
        "exposition": exposition,
        "describe": worker.describe(),
        "counters": repr(worker.counters),
        "settings": repr(worker.settings),
        "dead letter": repr(dead),
    }
    for where, text in places.items():
        assert SECRET not in text, f"the planted secret appears in the worker's {where}"


@pytest.mark.kafka
@pytest.mark.timeout(60)
def test_a_worker_that_cannot_authenticate_fails_without_printing_the_password(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    module = tmp_path / "secret_pipeline.py"
    module.write_text(
        "from cadenza.pipelines import Pipeline\n"
        "p = Pipeline('auth-check', tenant='t', latency_target='1s')\n"
        "p.source('auth-in').map(lambda r: r).sink('auth-out')\n"
    )
    env = {
        **os.environ,
        "CADENZA_BOOTSTRAP_SERVERS": kafka_settings.bootstrap_servers,
        "CADENZA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",  # the test broker speaks PLAINTEXT only
        "CADENZA_SASL_MECHANISM": "PLAIN",
        "CADENZA_SASL_USERNAME": "svc",
        "CADENZA_SASL_PASSWORD": SECRET,
        "CADENZA_REQUEST_TIMEOUT_MS": "3000",
        "CADENZA_LOG_LEVEL": "DEBUG",
    }
    done = subprocess.run(
        [sys.executable, "-m", "cadenza", "worker", str(module), "--group", group()],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=45,
        check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode != 0, output[-2000:]
    assert output.strip(), "the failure should be explained"
    assert SECRET not in output
    print(json.dumps({"exit": done.returncode, "last line": output.strip().splitlines()[-1]}))
