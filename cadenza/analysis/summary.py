"""SnailTrail's summaries of one window: where the critical participation lies.

The same CP numbers grouped four ways answer the four questions an owner asks of a late tenant:
what kind of work (``by_kind``), which worker (``by_worker``, stragglers first), which operator
(``by_operator``) and which hop (``by_channel``, sender -> receiver through a topic). Gaps count as
``unknown`` work on their worker, so ``by_kind`` sums to 1 over a window with paths. A message lies on
no single timeline, so its CP goes to its channel and to the ``message`` kind, not to a worker.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cadenza.analysis.activity import Activity
from cadenza.analysis.critical import WindowParticipation, window_participation

__all__ = ["WindowSummary", "channel_name", "summarize", "top", "window_summaries"]


def channel_name(message: Activity) -> str:
    """``sender -> receiver`` plus ``via topic`` when the topic is known: the key of ``by_channel``."""
    via = f" via {message.topic}" if message.topic else ""
    return f"{message.worker} -> {message.to_worker}{via}"


def top(shares: Mapping[str, float], n: int = 5) -> list[tuple[str, float]]:
    """The ``n`` largest shares, largest first (ties by name, so the order is reproducible)."""
    return sorted(shares.items(), key=lambda kv: (-kv[1], kv[0]))[:n]


@dataclass(frozen=True, slots=True)
class WindowSummary:
    """CP shares of one window grouped by kind, worker, operator and channel."""

    start: float
    end: float
    paths: int
    by_kind: dict[str, float] = field(default_factory=dict)
    by_worker: dict[str, float] = field(default_factory=dict)
    by_operator: dict[str, float] = field(default_factory=dict)
    by_channel: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """Plain JSON types; ``paths`` as a string because it can outgrow every JSON number type."""
        return {
            "start": self.start,
            "end": self.end,
            "paths": str(self.paths),
            "by_kind": dict(top(self.by_kind, len(self.by_kind))),
            "by_worker": dict(top(self.by_worker, len(self.by_worker))),
            "by_operator": dict(top(self.by_operator, len(self.by_operator))),
            "by_channel": dict(top(self.by_channel, len(self.by_channel))),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> WindowSummary:
        return cls(
            start=float(data["start"]),
            end=float(data["end"]),
            paths=int(data["paths"]),
            by_kind={str(k): float(v) for k, v in data["by_kind"].items()},
            by_worker={str(k): float(v) for k, v in data["by_worker"].items()},
            by_operator={str(k): float(v) for k, v in data["by_operator"].items()},
            by_channel={str(k): float(v) for k, v in data["by_channel"].items()},
        )


def _add(shares: dict[str, float], key: str, cp: float) -> None:
    shares[key] = shares.get(key, 0.0) + cp


def summarize(result: WindowParticipation) -> WindowSummary:
    """Group one window's CPs; every worker and kind that appears is listed, even at 0."""
    summary = WindowSummary(result.start, result.end, result.paths)
    for activity, cp in result.edges():
        _add(summary.by_kind, activity.kind, cp)
        if activity.is_message:
            _add(summary.by_channel, channel_name(activity), cp)
        else:
            _add(summary.by_worker, activity.worker, cp)
        if activity.operator is not None:
            _add(summary.by_operator, activity.operator, cp)
    return summary


def _touches(activity: Activity, start: float, end: float) -> bool:
    if activity.is_message:
        return start <= activity.start <= end or start <= activity.end <= end
    return activity.start < end and start < activity.end


def window_summaries(
    activities: Sequence[Activity], start: float, end: float, width: float, *, workers: Iterable[str] = ()
) -> list[WindowSummary]:
    """Summaries of the tumbling windows ``[start + k*width, start + (k+1)*width)`` covering ``[start, end)``.

    Each window's graph is built from the activities touching it, so one window's bad input does not
    hide the others' and the cost stays linear in the trace. ``workers`` (default: every worker named
    in ``activities``) all get a timeline in every window: a worker that recorded nothing in a window
    still offers the paths of its unknown gap, as it would had it been observed idle.
    """
    if not width > 0:
        raise ValueError(f"window width must be positive, got {width!r}")
    if not end > start:
        raise ValueError(f"analysis range [{start!r}, {end!r}) must end after it starts")
    pool = list(dict.fromkeys([*workers, *(a.worker for a in activities)]))
    summaries: list[WindowSummary] = []
    k = 0
    while start + k * width < end:
        lo, hi = start + k * width, min(start + (k + 1) * width, end)
        inside = [a for a in activities if _touches(a, lo, hi)]
        present = {a.worker for a in inside} | {a.to_worker for a in inside if a.to_worker}
        # A zero-length unknown activity at the window's start names an absent worker without
        # adding an edge: its timeline is then one gap across the window.
        inside += [Activity(w, lo, lo, "unknown") for w in pool if w not in present]
        summaries.append(summarize(window_participation(inside, lo, hi)))
        k += 1
    return summaries
