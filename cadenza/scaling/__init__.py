"""Scaling: DS2's one-step parallelism decision and partition migration plans.

Pure logic with no Kafka dependency, so that every decision can be checked exactly against a brute
force; the pool and the workers only feed it measured rates and apply what it returns.
"""

from cadenza.scaling.controller import (
    Action,
    ControllerSettings,
    PoolController,
    PoolDecision,
    RateWindow,
)
from cadenza.scaling.ds2 import InstanceRates, decide, raw_parallelism
from cadenza.scaling.migration import STRATEGIES, plan
from cadenza.scaling.rates import (
    ClosedWindow,
    RateSample,
    SubTopologyRates,
    TrueRateMeter,
    TrueRates,
    encode_true_rates,
    parse_true_rates,
    window_rates,
)
from cadenza.scaling.workers import UnderPartitioned, WorkerDemand, workers_for

__all__ = [
    "STRATEGIES",
    "Action",
    "ClosedWindow",
    "ControllerSettings",
    "InstanceRates",
    "PoolController",
    "PoolDecision",
    "RateSample",
    "RateWindow",
    "SubTopologyRates",
    "TrueRateMeter",
    "TrueRates",
    "UnderPartitioned",
    "WorkerDemand",
    "decide",
    "encode_true_rates",
    "parse_true_rates",
    "plan",
    "raw_parallelism",
    "window_rates",
    "workers_for",
]
