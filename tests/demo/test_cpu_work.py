"""The BA tenant's CPU work: a fixed count of rounds, or a fixed share of the thread's CPU time."""

from __future__ import annotations

import math
import time

import pytest

from cadenza.demo.cpu_work import burn, burn_cpu


def test_burn_cpu_uses_at_least_the_cpu_time_asked_for_and_scores_the_payload() -> None:
    started = time.thread_time()
    score = burn_cpu("job-7", 0.02)
    assert time.thread_time() - started >= 0.02
    assert score == burn_cpu("job-7", 0.0)  # the score depends on the payload, not on the rounds run
    assert score != burn_cpu("job-8", 0.0)
    assert score == burn("job-7", 0)


@pytest.mark.parametrize("seconds", [-0.001, math.inf, math.nan])
def test_burn_cpu_refuses_a_time_it_cannot_spend(seconds: float) -> None:
    with pytest.raises(ValueError, match="seconds must be a finite number >= 0"):
        burn_cpu("x", seconds)
