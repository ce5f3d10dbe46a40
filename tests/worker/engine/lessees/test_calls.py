"""What a lessee runs on a batch: outcomes per call, failures as outcomes, progress cleared."""

from __future__ import annotations

from cadenza.worker.engine.lessees.calls import FILTER, FLAT_MAP, MAP, run_batch


def _half(value: int) -> float:
    return 10 / value


def test_each_kind_and_a_failure_is_the_records_outcome_not_the_batchs() -> None:
    progress = [0.0, 0.0]
    outcomes, seconds = run_batch(MAP, _half, [1, 0, 5], progress)
    assert [ok for ok, _ in outcomes] == [True, False, True]
    assert outcomes[0][1] == 10.0 and outcomes[2][1] == 2.0
    assert isinstance(outcomes[1][1], ZeroDivisionError)
    assert seconds >= 0.0
    assert progress == [2.0, 0.0]  # the last call's index, no call running
    assert run_batch(FILTER, lambda v: v % 2, [1, 2], progress)[0] == [(True, True), (True, False)]
    assert run_batch(FLAT_MAP, range, [2, 0], progress)[0] == [(True, [0, 1]), (True, [])]
