"""Runtime operators: the run stage's implementation of each step kind (see ``base`` for the calling
convention)."""

from cadenza.worker.operators.base import Fanout, Operator, chain
from cadenza.worker.operators.routing import KeyByOp, SinkOp
from cadenza.worker.operators.stateless import BranchOp, FilterOp, FlatMapOp, MapOp
from cadenza.worker.operators.window_step import WindowOp

__all__ = [
    "BranchOp",
    "Fanout",
    "FilterOp",
    "FlatMapOp",
    "KeyByOp",
    "MapOp",
    "Operator",
    "SinkOp",
    "WindowOp",
    "chain",
]
