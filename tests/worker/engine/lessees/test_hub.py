"""The hub's budget and warm pool, with real lessee processes."""

from __future__ import annotations

from collections import deque

from cadenza.pipelines.parallel import ParallelSpec
from cadenza.worker.engine.lessees.calls import MAP
from cadenza.worker.engine.lessees.hub import LesseeHub
from cadenza.worker.engine.lessees.leased_step import Call
from cadenza.worker.engine.lessees.lessee import ProcessLessee


def double(value: int) -> int:
    return value * 2


def _ignore(_lane: deque[Call]) -> None:
    return None


def test_bursts_bind_the_same_process_and_the_budget_holds_to_cores_minus_one() -> None:
    """On two cores one process lessee at most: a lease binds the warm process, a release keeps it
    warm, and the next burst's lease binds it again; no interpreter is started per burst."""
    hub = LesseeHub(cores=2, warm=1, idle_release=0.1)
    step = hub.step(
        tenant="t",
        pipeline="p",
        node_id="2-map",
        kind=MAP,
        fn=double,
        spec=ParallelSpec(None, "process", None),
        release=_ignore,
    )
    try:
        hub.start()
        assert hub.ready(30.0)
        (warm,) = hub.warm
        seen = set()
        for burst in range(3):
            lessee = hub.lease(step, float(burst))
            assert isinstance(lessee, ProcessLessee)
            seen.add(lessee.ident)
            assert not hub.free("process")  # cores - 1 = 1 leased: no room for another
            hub.give_back(lessee, float(burst) + 0.5)
            assert hub.free("process")
        assert seen == {warm.ident}
        assert [lessee.ident for lessee in hub.warm] == [warm.ident]
        assert step.leased_seconds(10.0) == 1.5  # three leases of 0.5 s each
    finally:
        hub.close()
    assert not warm.process.is_alive()
