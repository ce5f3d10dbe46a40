"""Which feedback-topic records the page's critical-path and pool sections show."""

from __future__ import annotations

import json
import time

from cadenza.dashboard.feedback import FeedbackReader, classify
from cadenza.settings import KafkaSettings
from cadenza.testing.pytest_plugin import NewTopic
from tests.worker.kafka_io import produce


def test_summaries_are_classified_by_kind_and_everything_else_is_skipped() -> None:
    path = {"kind": "critical_path_summary", "top": [{"operator": "count", "share": 0.7}]}
    decision = {"type": "scaling_decision", "desired_workers": 3}
    assert classify(json.dumps(path).encode()) == ("critical_path", path)
    assert classify(json.dumps(decision).encode()) == ("pool", decision)
    for other in (b"\x00\x01avro-bytes", b"[1, 2]", b'{"kind": "stats"}', b"", None, b"\xff\xfe"):
        assert classify(other) is None


def test_the_reader_follows_a_real_feedback_topic(kafka_settings: KafkaSettings, new_topic: NewTopic) -> None:
    topic = new_topic(partitions=1)
    path = {"kind": "critical_path", "top": [{"operator": "score", "share": 0.8}]}
    decision = {"kind": "scaling_decision", "desired_workers": 2}
    records = [(None, b"\x02avro-statistics", None), (None, json.dumps(path).encode(), None)]
    produce(kafka_settings, topic, [*records, (None, json.dumps(decision).encode(), None)])
    reader = FeedbackReader(kafka_settings, topic)
    try:
        deadline = time.monotonic() + 30
        while reader.extras()["pool"] is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert reader.extras() == {"critical_path": path, "pool": decision}
        assert reader.skipped == 1
    finally:
        reader.close()
