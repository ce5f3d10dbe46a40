"""The pool loop survives a broker that does not answer in time: the window is skipped, not the pool."""

from __future__ import annotations

import pytest

from cadenza.infra.kafka.errors import KafkaClientError
from cadenza.scaling.controller import ControllerSettings, PoolController
from cadenza.scaling.observe import Dataflow
from cadenza.scaling.pool import Pool, WorkerProcesses
from cadenza.scheduling.clock import VirtualClock
from cadenza.settings import KafkaSettings


def test_a_window_whose_arrival_rates_time_out_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = VirtualClock(0.0)
    controller = PoolController(ControllerSettings(), clock, workers=2)
    pool = Pool(
        KafkaSettings.load(bootstrap_servers="127.0.0.1:9"),
        "group",
        Dataflow({}, {}, []),
        controller,
        WorkerProcesses([]),
        clock=clock,
        interval_s=10.0,
    )

    def slow_broker() -> dict[str, float] | None:
        raise KafkaClientError("could not read to the end of [('in', 0)] within 30s")

    monkeypatch.setattr(pool, "arrival_rates", slow_broker)
    assert pool.step() is None
    assert pool.decisions == [] and controller.workers == 2
