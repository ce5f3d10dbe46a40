"""Migration plans: which partitions change owner in which step when the pool changes.

Moving every partition at once stalls all of them for the longest restore (the latency spike that
makes users avoid scaling); Megaphone's answer is to move a little at a time. ``"fluid"`` moves one
partition per step. ``"matching"`` keeps every worker busy with at most one transfer per step (one
sent, one received), which bounds the extra load on any worker while using the fewest steps that
allow: by Konig's edge-colouring theorem a bipartite multigraph's edges can be split into as many
matchings as its largest degree, and no fewer.

Pure: the plan says nothing about how a move is carried out, so it can be checked exhaustively.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import TypeVar

__all__ = ["STRATEGIES", "balanced", "plan"]

P = TypeVar("P", bound=Hashable)
W = TypeVar("W", bound=Hashable)

STRATEGIES = ("all", "fluid", "matching")

# A vertex of the sender/receiver graph: the same worker is two vertices, one per side, which is
# what makes the graph bipartite (a worker may send one partition and receive another in one step).
_Vertex = tuple[bool, Hashable]


def plan(current: Mapping[P, W], target: Mapping[P, W], strategy: str) -> list[dict[P, W]]:
    """The steps of moving from ``current`` to ``target`` ownership, each ``{partition: new_owner}``.

    Every partition whose owner differs moves exactly once, straight to its target owner, and no
    other partition appears. ``"all"``: one step (none if nothing moves); ``"fluid"``: one move per
    step, in ``current``'s order; ``"matching"``: each step a matching (no worker sends or receives
    more than one partition in it), in exactly as many steps as the most partitions any one worker
    sends or receives.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown migration strategy {strategy!r}; expected one of {STRATEGIES}")
    if current.keys() != target.keys():
        only_current = [p for p in current if p not in target]
        only_target = [p for p in target if p not in current]
        raise ValueError(
            "current and target must own the same partitions; "
            f"only in current: {only_current!r}, only in target: {only_target!r}"
        )
    moves = [(p, current[p], target[p]) for p in current if current[p] != target[p]]
    if not moves:
        return []
    if strategy == "all":
        return [{p: new for p, _, new in moves}]
    if strategy == "fluid":
        return [{p: new} for p, _, new in moves]
    colours = _edge_colouring(moves)
    steps: list[dict[P, W]] = [{} for _ in range(max(colours) + 1)]
    for (p, _, new), colour in zip(moves, colours, strict=True):
        steps[colour][p] = new
    return steps


def balanced(current: Mapping[tuple[str, int], W], workers: Sequence[W]) -> dict[tuple[str, int], W]:
    """A target ownership spreading each topic's partitions evenly over ``workers``, moving as few
    as it can: a partition stays with its owner while that owner is among ``workers`` and under its
    share of the topic; the others go, in partition order, to the workers holding fewest of it.

    Per topic, not over all topics: a worker with all of one topic's partitions (say, the one with
    the large state) and none of another's is balanced by count and not by load (what the group's
    cooperative-sticky assignor did in benchmark S5). The first workers get the remainders.
    """
    if not workers:
        raise ValueError("a target needs at least one worker")
    target: dict[tuple[str, int], W] = {}
    for topic in dict.fromkeys(topic for topic, _ in current):
        partitions = sorted(p for p in current if p[0] == topic)
        base, extra = divmod(len(partitions), len(workers))
        quota = {w: base + (1 if i < extra else 0) for i, w in enumerate(workers)}
        held = dict.fromkeys(workers, 0)
        left = []
        for partition in partitions:
            owner = current[partition]
            if owner in held and held[owner] < quota[owner]:
                target[partition] = owner
                held[owner] += 1
            else:
                left.append(partition)
        for partition in left:
            worker = min(workers, key=lambda w: (held[w] - quota[w], held[w]))
            target[partition] = worker
            held[worker] += 1
    return target


def _edge_colouring(moves: list[tuple[P, W, W]]) -> list[int]:
    """A proper edge colouring of the sender/receiver multigraph with max-degree colours.

    Konig's constructive proof: for each edge (u, v) take a colour ``a`` free at u and ``b`` free at
    v; if ``a`` is not also free at v, swap a and b along the alternating a/b path from v. In a
    bipartite graph that path never reaches u, so afterwards ``a`` is free at both ends.
    """
    degree: dict[_Vertex, int] = {}
    for _, old, new in moves:
        sides: tuple[_Vertex, _Vertex] = ((True, old), (False, new))
        for side in sides:
            degree[side] = degree.get(side, 0) + 1
    max_degree = max(degree.values())
    # at[vertex][colour] = index of the move coloured so at that vertex, or absent.
    at: dict[_Vertex, dict[int, int]] = {vertex: {} for vertex in degree}
    colour_of = [-1] * len(moves)

    def ends(index: int) -> tuple[_Vertex, _Vertex]:
        _, old, new = moves[index]
        return (True, old), (False, new)

    def free(vertex: _Vertex) -> int:
        used = at[vertex]
        return next(c for c in range(max_degree) if c not in used)

    for index in range(len(moves)):
        u, v = ends(index)
        a = free(u)
        if a in at[v]:
            b = free(v)
            path: list[int] = []
            vertex: _Vertex = v
            colour = a
            while colour in at[vertex]:
                edge = at[vertex][colour]
                path.append(edge)
                first, second = ends(edge)
                vertex = second if vertex == first else first
                colour = b if colour == a else a
            for edge in path:
                for end in ends(edge):
                    del at[end][colour_of[edge]]
            for edge in path:
                colour_of[edge] = b if colour_of[edge] == a else a
                for end in ends(edge):
                    at[end][colour_of[edge]] = edge
        colour_of[index] = a
        at[u][a] = index
        at[v][a] = index
    return colour_of
