"""How long a worker may read warm copies: paced by the slack of the records it has queued (pure)."""

from __future__ import annotations

import pytest

from cadenza.worker.kafka.ownership import warm_read_budget


def test_nothing_queued_reads_a_whole_slice() -> None:
    assert warm_read_budget(None, now=100.0, read_slice=0.01) == 0.01


@pytest.mark.parametrize(
    ("deadline", "expected"),
    [
        (100.5, 0.01),  # half of 0.5 s of slack, capped at the slice
        (100.012, 0.006),  # half the slack
        (100.0, 0.0),  # due now
        (99.0, 0.0),  # already late: the records first
    ],
)
def test_queued_records_leave_half_their_slack_at_most_a_slice(deadline: float, expected: float) -> None:
    assert warm_read_budget(deadline, now=100.0, read_slice=0.01) == pytest.approx(expected, abs=1e-12)
