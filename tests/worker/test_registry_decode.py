"""Avro sources read the Schema Registry wire format when the worker has a registry (no broker).

No Schema Registry server can run here, so these use the in-memory registry of tests/schemas/fakes.py
(shaped like confluent-kafka's client); the settings side builds confluent-kafka's real client, which
connects only on its first lookup.
"""

from __future__ import annotations

import pytest
from confluent_kafka import Message
from confluent_kafka.schema_registry import SchemaRegistryClient
from pydantic import BaseModel

from cadenza.errors import ConfigError
from cadenza.pipelines import Pipeline
from cadenza.schemas import ERROR_TYPE_HEADER, RegistryAvroCodec, codec_for
from cadenza.settings import KafkaSettings
from cadenza.worker.engine.counters import WorkerCounters
from cadenza.worker.engine.decode import SchemaRegistryUnavailableError, SourceDecoder, make_registry_client
from cadenza.worker.engine.tasks import build_tasks
from tests.schemas.fakes import FakeRegistry
from tests.worker.recording_output import RecordingOutput


class Order(BaseModel):
    id: int
    item: str


def avro_pipeline(topic: str) -> Pipeline:
    p = Pipeline("orders", tenant="shop", latency_target="1s")
    p.source(topic, value=Order, format="avro").map(lambda o: o.item).sink("items")
    return p


def decoder_for(registry: FakeRegistry | None) -> tuple[SourceDecoder, RecordingOutput, WorkerCounters]:
    """Only the dead-letter path writes to the output here."""
    out, counters = RecordingOutput(), WorkerCounters()
    tasks = build_tasks(
        avro_pipeline("orders-in").compile(), out.as_output(), counters, registry_client=registry
    )
    decoder = tasks[0].decoder
    assert isinstance(decoder, SourceDecoder)
    return decoder, out, counters


def message(value: bytes, offset: int = 0) -> Message:
    return Message(topic="orders-in", partition=0, offset=offset, key=None, value=value, headers=None)


def test_an_avro_source_decodes_registry_framed_values_under_the_topic_value_subject() -> None:
    registry = FakeRegistry()
    decoder, out, _ = decoder_for(registry)
    assert isinstance(decoder.codec, RegistryAvroCodec)
    assert decoder.codec.subject == "orders-in-value"
    producer_side = codec_for("avro", Order, registry, subject="orders-in-value")
    data = producer_side.encode(Order(id=7, item="pen"))
    assert data[0] == 0 and int.from_bytes(data[1:5], "big") >= 100  # magic byte and the schema id
    unit = decoder.decode(message(data), "orders-in", 0, 0)
    assert unit is not None
    assert unit.value == Order(id=7, item="pen")
    assert not out.records


def test_a_value_that_is_not_registry_framed_is_dead_lettered_and_decoding_goes_on() -> None:
    registry = FakeRegistry()
    decoder, out, counters = decoder_for(registry)
    schemaless = codec_for("avro", Order).encode(Order(id=1, item="x"))  # no registry frame
    assert decoder.decode(message(schemaless, 3), "orders-in", 0, 3) is None
    unknown_id = b"\x00" + (4242).to_bytes(4, "big") + b"\x02\x02x"
    assert decoder.decode(message(unknown_id, 4), "orders-in", 0, 4) is None
    assert out.topics == ["orders.dlq", "orders.dlq"]
    assert out.records[1].headers[ERROR_TYPE_HEADER] == b"UnknownSchema"
    assert counters.dead_letter_decode == 2
    good = codec_for("avro", Order, registry, subject="orders-in-value").encode(Order(id=2, item="y"))
    unit = decoder.decode(message(good, 5), "orders-in", 0, 5)
    assert unit is not None and unit.value.id == 2


def test_a_registry_outage_is_not_blamed_on_the_record() -> None:
    registry = FakeRegistry()
    writer = FakeRegistry()  # another registry's id: this decoder must ask its own registry about it
    decoder, out, _ = decoder_for(registry)
    data = codec_for("avro", Order, writer, subject="orders-in-value").encode(Order(id=1, item="x"))
    registry.outage = True
    with pytest.raises(
        SchemaRegistryUnavailableError, match=r"orders-in\[0\]@0: the Schema Registry could not"
    ):
        decoder.decode(message(data), "orders-in", 0, 0)
    assert not out.records  # not dead-lettered: the record may be fine


def test_without_a_registry_avro_sources_stay_schemaless_with_a_fingerprint() -> None:
    decoder, _, _ = decoder_for(None)
    assert not isinstance(decoder.codec, RegistryAvroCodec)
    assert decoder.with_headers


def test_registry_settings_are_validated_and_the_secret_stays_hidden() -> None:
    assert KafkaSettings().schema_registry_config() is None
    assert make_registry_client(KafkaSettings()) is None
    settings = KafkaSettings(
        schema_registry_url="https://registry.example:8081/",
        schema_registry_username="key",
        schema_registry_password="s3cret",
    )
    assert settings.schema_registry_url == "https://registry.example:8081"
    assert "s3cret" not in repr(settings)
    assert settings.schema_registry_config() == {
        "url": "https://registry.example:8081",
        "basic.auth.user.info": "key:s3cret",
    }
    assert isinstance(make_registry_client(settings), SchemaRegistryClient)
    for bad, message_part in (
        ({"schema_registry_url": "registry:8081"}, "CADENZA_SCHEMA_REGISTRY_URL.*must be"),
        ({"schema_registry_url": "http://user:hunter2@registry:8081"}, "without credentials"),
        ({"schema_registry_url": "http://r:8081", "schema_registry_username": "u"}, "together"),
        ({"schema_registry_username": "u", "schema_registry_password": "p"}, "schema_registry_url is not"),
    ):
        with pytest.raises(ConfigError, match=message_part) as raised:
            KafkaSettings.load(**bad)
        assert "hunter2" not in str(raised.value)


def test_registry_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CADENZA_SCHEMA_REGISTRY_URL", "http://127.0.0.1:8081")
    assert KafkaSettings().schema_registry_config() == {"url": "http://127.0.0.1:8081"}
