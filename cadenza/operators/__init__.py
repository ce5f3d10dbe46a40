"""Operator building blocks that are pure logic: windows, aggregators, watermarks, window aggregation,
the windowed join."""

from cadenza.operators.aggregations import Aggregate, Aggregator, Count, Max, Mean, Min, Sum, aggregate
from cadenza.operators.event_time import (
    Late,
    WatermarkTracker,
    WindowedAggregation,
    WindowFailure,
    WindowResult,
)
from cadenza.operators.join import LEFT, RIGHT, JoinMatch, WindowedJoin
from cadenza.operators.lift import Lift, Lifted, LiftedAggregator, LiftFailure
from cadenza.operators.window_assigners import (
    HoppingWindows,
    SessionStore,
    SessionWindows,
    SlidingWindows,
    TumblingWindows,
    Window,
    WindowAssigner,
    hopping,
    merge_session,
    session,
    sliding,
    tumbling,
)

__all__ = [
    "LEFT",
    "RIGHT",
    "Aggregate",
    "Aggregator",
    "Count",
    "HoppingWindows",
    "JoinMatch",
    "Late",
    "Lift",
    "LiftFailure",
    "Lifted",
    "LiftedAggregator",
    "Max",
    "Mean",
    "Min",
    "SessionStore",
    "SessionWindows",
    "SlidingWindows",
    "Sum",
    "TumblingWindows",
    "WatermarkTracker",
    "Window",
    "WindowAssigner",
    "WindowFailure",
    "WindowResult",
    "WindowedAggregation",
    "WindowedJoin",
    "aggregate",
    "hopping",
    "merge_session",
    "session",
    "sliding",
    "tumbling",
]
