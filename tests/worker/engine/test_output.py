"""The produce stage reports lost records at the flush, so their input offsets are never committed."""

from __future__ import annotations

import time

import pytest

from cadenza.infra.broker.embedded import free_port
from cadenza.infra.kafka.errors import DeliveryError
from cadenza.settings import KafkaSettings
from cadenza.worker.engine.output import Output
from cadenza.worker.kafka.lanes import ProduceLane


def test_records_a_cluster_never_acknowledges_fail_the_flush() -> None:
    # Nothing listens on this port: every record times out after the delivery timeout.
    settings = KafkaSettings(bootstrap_servers=f"127.0.0.1:{free_port()}", delivery_timeout_ms=1000)
    output = Output(settings, log_level=0)
    output.produce("anywhere", b"value", b"key")
    output.produce("anywhere", b"value", None, [("h", b"1")], partition=0)
    started = time.monotonic()
    with pytest.raises(DeliveryError, match=r"2 record\(s\) were not delivered"):
        output.flush()
    assert time.monotonic() - started < 10
    output.flush()  # reported once; nothing is pending any more


def pressed(output: Output) -> bool:
    """Read through a call, so that a type checker does not carry an earlier assertion over."""
    return output.pressure


def test_pressure_is_on_above_half_the_local_queue_and_off_once_it_drained() -> None:
    # Nothing listens: records stay in the local queue until the delivery timeout fails them. The
    # timeout is longer than the waits for the client's events below can take on a loaded machine:
    # with 1 s, the first record sometimes failed before the third was queued (1 run in 21).
    settings = KafkaSettings(bootstrap_servers=f"127.0.0.1:{free_port()}", delivery_timeout_ms=4000)
    output = Output(settings, log_level=0, **{"queue.buffering.max.messages": 6})
    for count in range(1, 4):
        # The client's own events (connection errors here, which keep coming) count until served.
        deadline = time.monotonic() + 5
        output.serve()
        while pressed(output) and time.monotonic() < deadline:
            time.sleep(0.01)
            output.serve()
        assert not pressed(output)
        output.produce("anywhere", b"value", str(count).encode())
    assert pressed(output)  # 3 of 6 queued: the worker stops fetching and starting quanta
    deadline = time.monotonic() + 20
    while pressed(output) and time.monotonic() < deadline:
        time.sleep(0.1)
        output.serve()  # what the worker does while it waits: failures are served, not lost
    assert not output.pressure
    with pytest.raises(DeliveryError, match=r"3 record\(s\) were not delivered"):
        output.flush()
    assert output.full_waits == 0


def test_lane_producers_are_each_flushed_served_and_pushed_back_by() -> None:
    # Nothing listens: every record of either producer fails after the delivery timeout.
    settings = KafkaSettings(bootstrap_servers=f"127.0.0.1:{free_port()}", delivery_timeout_ms=1000)
    lanes = [ProduceLane(0, ("urgent",), 5), ProduceLane(1, ("bulk",), 100)]
    output = Output.for_lanes(settings, lanes, log_level=0, **{"queue.buffering.max.messages": 4})
    assert [name for name, _ in output.lane_errors] == ["producer", "producer-lane1"]
    assert output.producer_for("urgent") is output.producer
    assert output.producer_for("bulk") is not output.producer
    assert output.producer_for("elsewhere") is output.producer
    output.produce("bulk", b"value", b"1")
    output.produce("bulk", b"value", b"2")
    assert pressed(output)  # the bulk producer alone is at its high mark: the worker holds back
    output.produce("urgent", b"value", b"3")
    with pytest.raises(DeliveryError, match=r"3 record\(s\) were not delivered"):
        output.flush()  # waits for both producers' records, and counts both producers' failures
