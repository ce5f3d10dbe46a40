"""Critical participation (SnailTrail, NSDI'18) over the program activity graph of one window.

The graph of a window ``[start, end]``:

* Every worker named in the input (as ``worker`` or ``to_worker``, even only by a message outside the
  window) has a timeline spanning the window. Its activities, truncated to the window, and the gaps
  between them (kind ``unknown``, including the gap before the first and after the last activity) are
  consecutive edges on it. ``waiting`` edges are in the timeline but carry no paths.
* Nodes are ``(worker, time)`` points: window bounds, activity bounds and message endpoints. A message
  endpoint splits the activity or gap it falls into; the parts' participations are summed.
* A message is an edge from ``(worker, start)`` to ``(to_worker, end)`` with weight ``end - start``.
  Decisions the model leaves open:

  - a message not wholly inside the window (sent before ``start`` or arriving after ``end``) is not
    part of that window's graph: it carries no paths and its CP is 0 (its endpoints do not split
    anything either), so every edge of the graph lies in the window and every path spans it;
  - a message from a worker to itself is an ordinary edge between two points of that timeline (it
    lets paths skip the activities in between, as a record handed over through a topic does);
  - a zero-length activity is a point, not an edge: its CP is 0;
  - zero-length messages may form a cycle among same-time points. A cycle that lies on some path
    from a window start to a window end makes the number of paths infinite and raises
    :class:`ValueError` naming a message on it; a cycle no such path touches is harmless and ignored.

* Paths run from any ``(w, start)`` to any ``(w', end)``. ``N`` counts them; ``N(a)`` counts those
  through edge ``a`` as (paths from sources into its tail) x (paths from its head to sinks), from one
  forward and one backward pass in topological order. ``CP(a) = duration(a) * N(a) / (N * (end - start))``,
  all 0 when ``N == 0``. Counts are exact Python integers (they grow exponentially with the number of
  messages) and each CP is one exact rational turned into a float once, so neither overflow nor
  cancellation can creep in.

Because every path spans the window and the timeline edges of a path tile it, the CPs of all edges
(activities, messages and gaps) sum to 1 whenever ``N > 0``.
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from cadenza.analysis.activity import UNKNOWN, WAITING, Activity

__all__ = ["WindowParticipation", "critical_participation", "window_participation"]


@dataclass(frozen=True, slots=True)
class WindowParticipation:
    """The CP of every edge of one window's graph: the given activities and the gaps found between them.

    ``cp[i]`` belongs to ``activities[i]`` (the input, in order); ``gap_cp[j]`` to ``gaps[j]``, the
    maximal unrecorded intervals of each timeline as ``unknown`` activities. Together they sum to 1
    when ``paths > 0``.
    """

    start: float
    end: float
    activities: tuple[Activity, ...]
    cp: tuple[float, ...]
    gaps: tuple[Activity, ...]
    gap_cp: tuple[float, ...]
    paths: int

    def edges(self) -> list[tuple[Activity, float]]:
        """Every activity with its CP, recorded ones first, then the gaps."""
        return list(zip(self.activities, self.cp, strict=True)) + list(
            zip(self.gaps, self.gap_cp, strict=True)
        )


def critical_participation(activities: Sequence[Activity], start: float, end: float) -> list[float]:
    """CP per activity of the window ``[start, end]``, in the order given (see the module docstring)."""
    return list(window_participation(activities, start, end).cp)


def _check_window(start: float, end: float) -> None:
    if not (math.isfinite(start) and math.isfinite(end)):
        raise ValueError(f"window [{start!r}, {end!r}] has a non-finite bound")
    if end <= start:
        raise ValueError(f"window [{start!r}, {end!r}] must end after it starts")


def _check_overlaps(activities: Sequence[Activity]) -> None:
    """Two activities of one timeline may touch but not overlap, since a worker does one thing at a time."""
    by_worker: dict[str, list[Activity]] = {}
    for a in activities:
        if not a.is_message:
            by_worker.setdefault(a.worker, []).append(a)
    for items in by_worker.values():
        # Zero-length activities sort before longer ones starting at the same time, so a point at the
        # start of an interval is accepted and a point strictly inside one is caught.
        items.sort(key=lambda a: (a.start, a.end))
        latest = items[0]
        for a in items[1:]:
            if a.start < latest.end and latest.start < a.end:
                raise ValueError(
                    f"overlapping activities on worker {a.worker!r}: {latest.describe()} and {a.describe()}"
                )
            if a.end >= latest.end:
                latest = a


# An edge of the graph: tail node, head node, and whose participation it adds to: (False, i) for
# activities[i], (True, j) for gaps[j].
_Edge = tuple[int, int, bool, int]


def window_participation(activities: Sequence[Activity], start: float, end: float) -> WindowParticipation:
    """The CP of every activity and every gap of the window ``[start, end]`` (see the module docstring)."""
    _check_window(start, end)
    acts = tuple(activities)
    for a in acts:
        a.check()
    _check_overlaps(acts)

    workers: list[str] = []
    seen: set[str] = set()
    for a in acts:
        for w in (a.worker, a.to_worker):
            if w is not None and w not in seen:
                seen.add(w)
                workers.append(w)

    inside = [a.is_message and start <= a.start and a.end <= end for a in acts]
    points: dict[str, set[float]] = {w: {start, end} for w in workers}
    spans: dict[str, list[tuple[float, float, int]]] = {w: [] for w in workers}
    for i, a in enumerate(acts):
        if a.is_message:
            if inside[i]:
                assert a.to_worker is not None
                points[a.worker].add(a.start)
                points[a.to_worker].add(a.end)
            continue
        lo, hi = max(a.start, start), min(a.end, end)
        if lo < hi:
            points[a.worker].update((lo, hi))
            spans[a.worker].append((lo, hi, i))

    node_ids: dict[tuple[str, float], int] = {}

    def node(w: str, t: float) -> int:
        return node_ids.setdefault((w, t), len(node_ids))

    edges: list[_Edge] = []
    weights: list[float] = []
    gaps: list[Activity] = []
    for w in workers:
        times = sorted(points[w])
        owned = sorted(spans[w])
        k = 0
        gap_start: float | None = None
        for t in times:  # every point is a node, even between two waiting parts
            node(w, t)
        for lo, hi in itertools.pairwise(times):
            while k < len(owned) and owned[k][1] <= lo:
                k += 1
            if k < len(owned) and owned[k][0] <= lo:
                if gap_start is not None:
                    gaps.append(Activity(w, gap_start, lo, UNKNOWN))
                    gap_start = None
                i = owned[k][2]
                if acts[i].kind != WAITING:
                    edges.append((node(w, lo), node(w, hi), False, i))
                    weights.append(hi - lo)
            else:
                if gap_start is None:
                    gap_start = lo
                edges.append((node(w, lo), node(w, hi), True, len(gaps)))
                weights.append(hi - lo)
        if gap_start is not None:
            gaps.append(Activity(w, gap_start, end, UNKNOWN))
    for i, a in enumerate(acts):
        if inside[i]:
            assert a.to_worker is not None
            edges.append((node(a.worker, a.start), node(a.to_worker, a.end), False, i))
            weights.append(a.end - a.start)

    sources = [node_ids[(w, start)] for w in workers]
    sinks = [node_ids[(w, end)] for w in workers]
    forward, backward, paths = _count_paths(len(node_ids), edges, sources, sinks, acts)

    cp_num = [Fraction(0)] * len(acts)
    gap_num = [Fraction(0)] * len(gaps)
    if paths:
        for (u, v, is_gap, owner), weight in zip(edges, weights, strict=True):
            through = forward[u] * backward[v]
            if through and weight:
                share = Fraction(weight) * through
                if is_gap:
                    gap_num[owner] += share
                else:
                    cp_num[owner] += share
    scale = paths * Fraction(end - start)
    cp = tuple(float(n / scale) if n else 0.0 for n in cp_num)
    gap_cp = tuple(float(n / scale) if n else 0.0 for n in gap_num)
    return WindowParticipation(start, end, acts, cp, tuple(gaps), gap_cp, paths)


def _reach(n: int, adjacency: list[list[int]], roots: list[int]) -> list[bool]:
    seen = [False] * n
    queue = deque(roots)
    for r in roots:
        seen[r] = True
    while queue:
        u = queue.popleft()
        for v in adjacency[u]:
            if not seen[v]:
                seen[v] = True
                queue.append(v)
    return seen


def _count_paths(
    n: int, edges: list[_Edge], sources: list[int], sinks: list[int], acts: tuple[Activity, ...]
) -> tuple[list[int], list[int], int]:
    """Paths from sources into each node, from each node to sinks, and in all.

    Only nodes both reachable from a source and reaching a sink matter (any other edge has a zero
    factor), so the topological sort runs on those; a cycle left among them means infinitely many paths.
    """
    out: list[list[int]] = [[] for _ in range(n)]
    into: list[list[int]] = [[] for _ in range(n)]
    for u, v, _, _ in edges:
        out[u].append(v)
        into[v].append(u)
    from_source = _reach(n, out, sources)
    to_sink = _reach(n, into, sinks)
    useful = [from_source[i] and to_sink[i] for i in range(n)]

    indegree = [0] * n
    for u, v, _, _ in edges:
        if useful[u] and useful[v]:
            indegree[v] += 1
    order = [i for i in range(n) if useful[i] and indegree[i] == 0]
    for u in order:  # the list grows while it is walked: Kahn's algorithm
        for v in out[u]:
            if useful[v]:
                indegree[v] -= 1
                if indegree[v] == 0:
                    order.append(v)
    if len(order) < sum(useful):
        raise ValueError(
            "zero-length messages form a cycle on a path through the window, "
            f"making the number of paths infinite: {_cycle_message(edges, useful, indegree, acts)}"
        )

    forward = [0] * n
    for s in sources:
        if useful[s]:
            forward[s] += 1
    for u in order:
        for v in out[u]:
            if useful[v]:
                forward[v] += forward[u]
    backward = [0] * n
    for t in sinks:
        if useful[t]:
            backward[t] += 1
    for u in reversed(order):
        for v in out[u]:
            if useful[v]:
                backward[u] += backward[v]
    paths = sum(backward[s] for s in sources)
    return forward, backward, paths


def _cycle_message(
    edges: list[_Edge], useful: list[bool], indegree: list[int], acts: tuple[Activity, ...]
) -> str:
    """Name a message on a cycle left by the topological sort.

    Every node the sort could not place still has an unplaced predecessor, so walking predecessors
    must revisit a node; the walk from there on is a cycle. Timeline edges have positive length, so a
    cycle (which returns to its start time) is made of zero-length messages only.
    """
    pred: dict[int, tuple[int, int]] = {}
    for u, v, is_gap, owner in edges:
        if not is_gap and useful[u] and useful[v] and indegree[u] > 0 and indegree[v] > 0:
            pred.setdefault(v, (u, owner))
    node = next(iter(pred))
    visited: set[int] = set()
    while node not in visited:
        visited.add(node)
        node = pred[node][0]
    return acts[pred[node][1]].describe()
