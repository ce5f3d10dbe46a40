"""Deadline-aware scheduling: contexts, policies (Cameo's hooks), cost estimates and the scheduler.

Pure logic with no Kafka dependency, so that every ordering decision can be tested exactly against a
:class:`VirtualClock`.
"""

from cadenza.scheduling.clock import Clock, SystemClock, VirtualClock
from cadenza.scheduling.context import (
    CONTEXT_HEADER,
    CONTEXT_VERSION,
    MAX_CONTEXT_BYTES,
    MAX_ID_BYTES,
    ContextDecodeStats,
    SchedulingContext,
    decode_context,
    decode_or_fresh,
    encode_context,
    new_trace_id,
    result_deadline,
    retrace,
    start_deadline,
)
from cadenza.scheduling.costs import DEFAULT_OPERATOR_COST, CostModel
from cadenza.scheduling.policies import CameoPolicy, EdfPolicy, FairPolicy, FifoPolicy, SjfPolicy
from cadenza.scheduling.policy import (
    HOOKS,
    BasePolicy,
    Measurement,
    OperatorInfo,
    Priority,
    Reply,
    SchedulingPolicy,
    SourceRecordInfo,
)
from cadenza.scheduling.registry import BUILTIN_POLICIES, get_policy, load_policy_class
from cadenza.scheduling.scheduler import Quantum, Scheduler, drain

__all__ = [
    "BUILTIN_POLICIES",
    "CONTEXT_HEADER",
    "CONTEXT_VERSION",
    "DEFAULT_OPERATOR_COST",
    "HOOKS",
    "MAX_CONTEXT_BYTES",
    "MAX_ID_BYTES",
    "BasePolicy",
    "CameoPolicy",
    "Clock",
    "ContextDecodeStats",
    "CostModel",
    "EdfPolicy",
    "FairPolicy",
    "FifoPolicy",
    "Measurement",
    "OperatorInfo",
    "Priority",
    "Quantum",
    "Reply",
    "Scheduler",
    "SchedulingContext",
    "SchedulingPolicy",
    "SjfPolicy",
    "SourceRecordInfo",
    "SystemClock",
    "VirtualClock",
    "decode_context",
    "decode_or_fresh",
    "drain",
    "encode_context",
    "get_policy",
    "load_policy_class",
    "new_trace_id",
    "result_deadline",
    "retrace",
    "start_deadline",
]
