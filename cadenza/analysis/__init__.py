"""Where the time goes: SnailTrail's critical participation over a pool of cadenza workers.

:func:`critical_participation` is the pure core (one window's program activity graph, exact path
counts); :mod:`cadenza.analysis.summary` groups its result by activity kind, worker, operator and
channel.
"""

from cadenza.analysis.activity import KINDS, Activity
from cadenza.analysis.critical import WindowParticipation, critical_participation, window_participation
from cadenza.analysis.summary import WindowSummary, channel_name, summarize, top, window_summaries

__all__ = [
    "KINDS",
    "Activity",
    "WindowParticipation",
    "WindowSummary",
    "channel_name",
    "critical_participation",
    "summarize",
    "top",
    "window_participation",
    "window_summaries",
]
