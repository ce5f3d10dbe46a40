"""Brute-force window results, written independently of cadenza's window code.

Used by the watermark determinism tests (unit level and through the broker): when no record is late,
the windows a worker emits must be exactly the windows of the whole input that the final watermark
closes, whatever order the records arrived in. Times and sizes are whole seconds so that no float
rounding can make the two computations disagree.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Iterable

#: (key, window start, window end, sum of the values in the window)
Expected = tuple[Hashable, float, float, int]


def windows_of(kind: str, size: int, hop: int, t: int) -> list[tuple[int, int]]:
    """The fixed windows holding ``t``: every ``[k*hop, k*hop + size)`` around it (hop = size: tumbling)."""
    step = size if kind == "tumbling" else hop
    first = (t - size) // step
    starts = (k * step for k in range(first, t // step + 1))
    return [(start, start + size) for start in starts if start <= t < start + size]


def expected_windows(
    kind: str,
    records: Iterable[tuple[Hashable, int, int]],
    *,
    size: int,
    hop: int = 0,
    gap: int = 0,
    watermark: float,
    lateness: float = 0.0,
) -> set[Expected]:
    """Every window of ``records`` (key, event time, value) closed by ``watermark``, with its sum."""
    by_key: dict[Hashable, list[tuple[int, int]]] = defaultdict(list)
    for key, t, value in records:
        by_key[key].append((t, value))
    out: set[Expected] = set()
    for key, items in by_key.items():
        items.sort()
        if kind in ("tumbling", "hopping"):
            sums: dict[tuple[int, int], int] = defaultdict(int)
            for t, value in items:
                for window in windows_of(kind, size, hop, t):
                    sums[window] += value
            out.update((key, s, e, total) for (s, e), total in sums.items() if e + lateness <= watermark)
        elif kind == "sliding":
            for end in sorted({t for t, _ in items}):
                if end + lateness <= watermark:
                    total = sum(value for t, value in items if end - size <= t <= end)
                    out.add((key, end - size, end, total))
        elif kind == "session":
            sessions: list[list[int]] = []  # [first, last, sum]
            for t, value in items:
                if sessions and t <= sessions[-1][1] + gap:
                    sessions[-1][1] = t
                    sessions[-1][2] += value
                else:
                    sessions.append([t, t, value])
            out.update(
                (key, first, last + gap, total)
                for first, last, total in sessions
                if last + gap + lateness <= watermark
            )
        else:
            raise ValueError(kind)
    return out
