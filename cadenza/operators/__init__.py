"""Operator building blocks that are pure logic: windows, aggregators, watermarks, window aggregation."""

from cadenza.operators.aggregations import Aggregate, Aggregator, Count, Max, Mean, Min, Sum, aggregate
from cadenza.operators.event_time import (
    Late,
    StateStore,
    WatermarkTracker,
    WindowedAggregation,
    WindowFailure,
    WindowResult,
)
from cadenza.operators.windows import (
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
    "Aggregate",
    "Aggregator",
    "Count",
    "HoppingWindows",
    "Late",
    "Max",
    "Mean",
    "Min",
    "SessionStore",
    "SessionWindows",
    "SlidingWindows",
    "StateStore",
    "Sum",
    "TumblingWindows",
    "WatermarkTracker",
    "Window",
    "WindowAssigner",
    "WindowFailure",
    "WindowResult",
    "WindowedAggregation",
    "aggregate",
    "hopping",
    "merge_session",
    "session",
    "sliding",
    "tumbling",
]
