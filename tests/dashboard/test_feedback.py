"""Which feedback-topic records the page's critical-path, pool and true-rates sections show."""

from __future__ import annotations

import json
import time

from cadenza.dashboard.feedback import FeedbackReader, classify
from cadenza.feedback.records import (
    CRITICAL_PARTICIPATION_KIND,
    KIND_HEADER,
    POOL_DECISION_KIND,
    TRUE_RATES_KIND,
)
from cadenza.infra.kafka.clients import flush_or_raise, make_producer
from cadenza.scaling import SubTopologyRates, TrueRates, encode_true_rates
from cadenza.settings import KafkaSettings
from cadenza.testing.pytest_plugin import NewTopic


def test_summaries_are_classified_by_their_kind_header_and_everything_else_is_skipped() -> None:
    path = {"window_start": 1.0, "by_operator": [{"operator": "count", "share": 0.7}]}
    decision = {"desired": 3, "workers": 2}
    assert classify(CRITICAL_PARTICIPATION_KIND, json.dumps(path).encode()) == ("critical_path", path)
    assert classify(POOL_DECISION_KIND, json.dumps(decision).encode()) == ("pool", decision)
    rates = encode_true_rates(
        TrueRates("w1", 1.0, 11.0, (SubTopologyRates("t", "p", "in", 9.0, 9.0, 3.0, 3.0),))
    )
    assert classify(TRUE_RATES_KIND, rates) == ("true_rates", json.loads(rates))
    # no header (the stats job's Avro statistics), an unknown kind, or a body that is not a JSON object
    assert classify(None, json.dumps(path).encode()) is None
    assert classify(b"stats", json.dumps(path).encode()) is None
    for other in (b"\x00\x01avro-bytes", b"[1, 2]", b"", None, b"\xff\xfe"):
        assert classify(POOL_DECISION_KIND, other) is None


def test_the_reader_follows_a_real_feedback_topic(kafka_settings: KafkaSettings, new_topic: NewTopic) -> None:
    topic = new_topic(partitions=1)
    path = {"window_start": 2.0, "by_operator": [{"operator": "score", "share": 0.8}]}
    decision = {"desired": 2, "workers": 1}
    producer, _ = make_producer(kafka_settings)
    producer.produce(topic, b"\x02avro-statistics")
    producer.produce(topic, json.dumps(path).encode(), headers=[(KIND_HEADER, CRITICAL_PARTICIPATION_KIND)])
    producer.produce(topic, json.dumps(decision).encode(), headers=[(KIND_HEADER, POOL_DECISION_KIND)])
    older = TrueRates("w1", 1.0, 11.0, (SubTopologyRates("t", "p", "in", 9.0, 9.0, 3.0, 3.0),))
    newer = TrueRates("w2", 2.0, 12.0, (SubTopologyRates("t", "p", "in", 8.0, 8.0, 4.0, 4.0),))
    for rates in (older, newer):
        producer.produce(topic, encode_true_rates(rates), b"w", headers=[(KIND_HEADER, TRUE_RATES_KIND)])
    flush_or_raise(producer, None, 30.0)
    reader = FeedbackReader(kafka_settings, topic)
    try:
        deadline = time.monotonic() + 30
        while (reader.extras()["true_rates"] or {}).get("worker") != "w2" and time.monotonic() < deadline:
            time.sleep(0.2)
        expected_rates = json.loads(encode_true_rates(newer))
        assert reader.extras() == {"critical_path": path, "pool": decision, "true_rates": expected_rates}
        assert reader.skipped == 1
    finally:
        reader.close()
