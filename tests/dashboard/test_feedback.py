"""Which feedback-topic records the page's critical-path and pool sections show."""

from __future__ import annotations

import json

from cadenza.dashboard.feedback import classify


def test_summaries_are_classified_by_kind_and_everything_else_is_skipped() -> None:
    path = {"kind": "critical_path_summary", "top": [{"operator": "count", "share": 0.7}]}
    decision = {"type": "scaling_decision", "desired_workers": 3}
    assert classify(json.dumps(path).encode()) == ("critical_path", path)
    assert classify(json.dumps(decision).encode()) == ("pool", decision)
    for other in (b"\x00\x01avro-bytes", b"[1, 2]", b'{"kind": "stats"}', b"", None, b"\xff\xfe"):
        assert classify(other) is None
