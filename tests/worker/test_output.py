"""The produce stage reports lost records at the flush, so their input offsets are never committed."""

from __future__ import annotations

import time

import pytest

from cadenza.infra.broker.embedded import free_port
from cadenza.infra.kafka.errors import DeliveryError
from cadenza.settings import KafkaSettings
from cadenza.worker.output import Output


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
    # Nothing listens: records stay in the local queue until the delivery timeout fails them.
    settings = KafkaSettings(bootstrap_servers=f"127.0.0.1:{free_port()}", delivery_timeout_ms=1000)
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
    deadline = time.monotonic() + 10
    while pressed(output) and time.monotonic() < deadline:
        time.sleep(0.1)
        output.serve()  # what the worker does while it waits: failures are served, not lost
    assert not output.pressure
    with pytest.raises(DeliveryError, match=r"3 record\(s\) were not delivered"):
        output.flush()
    assert output.full_waits == 0
