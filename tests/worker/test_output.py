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
