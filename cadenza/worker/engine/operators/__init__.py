"""Runtime operators: the run stage's implementation of each step kind (see ``base`` for the calling
convention)."""

from cadenza.worker.engine.operators.base import Fanout, Operator, chain
from cadenza.worker.engine.operators.routing import KeyByOp, SinkOp
from cadenza.worker.engine.operators.stateless import BranchOp, FilterOp, FlatMapOp, MapOp
from cadenza.worker.engine.operators.window_step import WindowOp

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
