"""The two orders of ``bench_produce_order.py`` hand every partition the same records, only in
another order: what the benchmark compares is the order alone."""

from __future__ import annotations

from collections import Counter
from itertools import pairwise

from bench_produce_order import partition_of


def test_both_orders_give_each_partition_the_same_count_and_differ_only_in_order() -> None:
    partitions, run, records = 20, 50, 20 * 50 * 3
    runs = [partition_of("runs", i, partitions, run) for i in range(records)]
    turns = [partition_of("round-robin", i, partitions, run) for i in range(records)]
    assert Counter(runs) == Counter(turns) == dict.fromkeys(range(partitions), records // partitions)
    # Runs: 50 in a row per partition; round-robin: never twice in a row.
    assert runs[:run] == [0] * run and runs[run] == 1
    assert all(a != b for a, b in pairwise(turns))
