"""The worker's recorder merges intervals, batches them and round-trips them through Avro."""

from __future__ import annotations

import pytest

from cadenza.analysis import Activity
from cadenza.analysis.recorder import ActivityRecorder
from cadenza.analysis.trace import decode_batch, encode_batch


def collecting() -> tuple[list[list[Activity]], ActivityRecorder]:
    batches: list[list[Activity]] = []
    return batches, ActivityRecorder("w1", lambda data: batches.append(decode_batch(data)), linger=1.0)


def test_adjacent_intervals_of_one_operator_merge_and_others_do_not() -> None:
    batches, rec = collecting()
    rec.record("processing", 10.0, 10.5, "p/op")
    rec.record("processing", 10.5001, 11.0, "p/op")  # within merge_gap: one activity
    rec.record("processing", 11.0, 11.25, "p/other")
    rec.record("waiting", 11.5, 12.0)
    rec.flush()
    assert batches == [
        [
            Activity("w1", 10.0, 11.0, "processing", "p/op"),
            Activity("w1", 11.0, 11.25, "processing", "p/other"),
            Activity("w1", 11.5, 12.0, "waiting"),
        ]
    ]
    assert rec.sent == 3


def test_an_interval_overlapping_the_previous_one_is_clipped() -> None:
    batches, rec = collecting()
    rec.record("processing", 1.0, 2.0, "a")
    rec.record("fault_tolerance", 1.5, 2.5)
    rec.flush()
    assert batches[0][1] == Activity("w1", 2.0, 2.5, "fault_tolerance")


def test_batches_leave_after_linger() -> None:
    batches, rec = collecting()
    rec.poll(100.0)
    rec.record("processing", 100.0, 100.2, "a")
    rec.record("waiting", 100.3, 100.4)
    rec.poll(100.5)
    assert batches == []
    rec.poll(101.0)
    # The still-growing last interval is sent too; the next one starts a new activity.
    assert [a.kind for a in batches[0]] == ["processing", "waiting"]


def test_pending_is_bounded_and_drops_are_counted() -> None:
    batches, rec = collecting()
    rec.max_pending = 2
    for k in range(5):
        rec.record("processing", k, k + 0.5, f"op{k}")
    rec.flush()
    assert len(batches[0]) == 2
    assert rec.dropped == 3


def test_messages_round_trip_with_their_sender() -> None:
    batches, rec = collecting()
    rec.message("w0", 5.0, 5.25, "mid")
    rec.flush()
    assert batches == [[Activity("w0", 5.0, 5.25, "message", None, "w1", "mid")]]


def test_recording_a_message_kind_or_an_unknown_kind_raises() -> None:
    _, rec = collecting()
    with pytest.raises(ValueError, match="message"):
        rec.record("message", 0, 1)
    with pytest.raises(ValueError, match="'sleeping'"):
        rec.record("sleeping", 0, 1)


def test_encoding_refuses_activities_of_another_worker() -> None:
    with pytest.raises(ValueError, match="not on 'w1'"):
        encode_batch("w1", [Activity("w2", 0, 1, "processing")])
    with pytest.raises(ValueError, match="not received by 'w1'"):
        encode_batch("w1", [Activity("w1", 0, 1, "message", to_worker="w2")])


@pytest.mark.parametrize("data", [b"", b"\x02w", b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"])
def test_garbage_is_a_clear_error(data: bytes) -> None:
    with pytest.raises(ValueError, match="not an activity batch"):
        decode_batch(data)


def test_a_decoded_batch_with_a_bad_activity_names_it() -> None:
    data = encode_batch("w1", [Activity("w1", 0, 1, "processing", "op")])
    # Rewrite the kind inside the encoded bytes: same length, so the record stays well-formed.
    bad = data.replace(b"processing", b"processinG")
    with pytest.raises(ValueError, match=r"unknown kind 'processinG'.*operator='op'"):
        decode_batch(bad)
