"""``bench_worker.produced_rate``: outputs over the span of their produce timestamps, and no figure
where millisecond stamps cannot carry one."""

from __future__ import annotations

import pytest
from bench_worker import produced_rate


def test_the_rate_counts_the_outputs_after_the_first_over_the_stamps_span() -> None:
    assert produced_rate(1001, 5_000, 5_500) == pytest.approx(2000.0)


@pytest.mark.parametrize(
    ("outputs", "first_ms", "last_ms"),
    [(1, 5_000, 6_000), (1000, -1, -1), (1000, 5_000, 5_099)],
)
def test_no_rate_without_two_outputs_stamps_or_a_resolvable_span(
    outputs: int, first_ms: int, last_ms: int
) -> None:
    assert produced_rate(outputs, first_ms, last_ms) is None
