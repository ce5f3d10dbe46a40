"""DS2's one-step parallelism decision (Kalavri et al., OSDI'18), as a pure function.

Threshold autoscalers guess a direction and take many steps; DS2 instead asks what each operator
could do if it never waited. An instance's *true* rates are records per second of useful time
(decode + run + encode), so ``sum(true_processing) / p`` is what one instance can absorb whatever its
current load. Walking the dataflow in topological order, each operator gets the input its upstreams
would emit at the target rate, and the ratio of that input to one instance's capacity is the
parallelism it needs: one step instead of a search.

The expressions below are DS2's model verbatim (not algebraically simplified), because the result is
checked bit for bit against a brute force of the same formula.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["InstanceRates", "decide", "raw_parallelism"]


@dataclass(frozen=True)
class InstanceRates:
    """One operator instance's rates in records per second.

    ``true_*`` are per second of useful time (what DS2 decides from); ``observed_*`` per second of
    wall time, kept beside them so a caller can see how busy the instance was.
    """

    true_processing: float
    true_output: float
    observed_processing: float = 0.0
    observed_output: float = 0.0


def _check_rate(operator: str, index: int, name: str, value: float) -> None:
    if not math.isfinite(value) or value < 0:
        raise ValueError(
            f"operator {operator!r} instance {index}: {name} must be a finite rate >= 0, got {value!r}"
        )


def _topological_order(operators: Mapping[str, int], edges: Sequence[tuple[str, str]]) -> list[str]:
    """Kahn's algorithm, ready operators taken in the order ``operators`` lists them (deterministic)."""
    indegree = dict.fromkeys(operators, 0)
    downstream: dict[str, list[str]] = {name: [] for name in operators}
    for upstream, down in edges:
        downstream[upstream].append(down)
        indegree[down] += 1
    position = {name: i for i, name in enumerate(operators)}
    ready = deque(name for name in operators if indegree[name] == 0)
    order: list[str] = []
    while ready:
        name = ready.popleft()
        order.append(name)
        newly_ready = []
        for down in downstream[name]:
            indegree[down] -= 1
            if indegree[down] == 0:
                newly_ready.append(down)
        ready.extend(sorted(newly_ready, key=position.__getitem__))
    if len(order) != len(operators):
        in_cycle = sorted(name for name, degree in indegree.items() if degree > 0)
        raise ValueError(f"the dataflow has a cycle through operators {in_cycle}")
    return order


def _validate(
    operators: Mapping[str, int],
    edges: Sequence[tuple[str, str]],
    rates: Mapping[str, Sequence[InstanceRates]],
    source_rates: Mapping[str, float] | None,
    over_provisioning: float,
) -> None:
    for name, instances in operators.items():
        if isinstance(instances, bool) or not isinstance(instances, int) or instances <= 0:
            raise ValueError(
                f"operator {name!r} must have a positive whole number of instances, got {instances!r}"
            )
    for edge in edges:
        if len(edge) != 2:
            raise ValueError(f"edge {edge!r} must be an (upstream, downstream) pair")
        for end in edge:
            if end not in operators:
                raise ValueError(f"edge {edge!r} names an unknown operator {end!r}")
    for name in rates:
        if name not in operators:
            raise ValueError(f"rates are given for an unknown operator {name!r}")
    for name, instances in operators.items():
        if name not in rates:
            raise ValueError(f"operator {name!r} has no rates")
        per_instance = rates[name]
        if len(per_instance) != instances:
            raise ValueError(
                f"operator {name!r} has {instances} instances but {len(per_instance)} rate entries "
                "(one InstanceRates per instance is required)"
            )
        for index, rate in enumerate(per_instance):
            _check_rate(name, index, "true_processing", rate.true_processing)
            _check_rate(name, index, "true_output", rate.true_output)
            _check_rate(name, index, "observed_processing", rate.observed_processing)
            _check_rate(name, index, "observed_output", rate.observed_output)
    if source_rates is not None:
        has_upstream = {down for _, down in edges}
        for name, source_rate in source_rates.items():
            if name not in operators:
                raise ValueError(f"source_rates names an unknown operator {name!r}")
            if name in has_upstream:
                raise ValueError(f"source_rates names {name!r}, which is not a source (it has an upstream)")
            if not math.isfinite(source_rate) or source_rate < 0:
                raise ValueError(f"source rate of {name!r} must be a finite rate >= 0, got {source_rate!r}")
    if not math.isfinite(over_provisioning) or over_provisioning < 0:
        raise ValueError(f"over_provisioning must be a finite fraction >= 0, got {over_provisioning!r}")


def raw_parallelism(
    operators: Mapping[str, int],
    edges: Sequence[tuple[str, str]],
    rates: Mapping[str, Sequence[InstanceRates]],
    source_rates: Mapping[str, float] | None = None,
) -> dict[str, float]:
    """DS2's unrounded ``raw_i`` per operator (a source's is its current instance count).

    :func:`decide` rounds these up; the pool needs them unrounded, because a worker runs every
    sub-topology and fractions of different sub-topologies share its core. Same checks as
    :func:`decide`.
    """
    _validate(operators, edges, rates, source_rates, 0.0)
    return _raw(operators, edges, rates, source_rates)


def _raw(
    operators: Mapping[str, int],
    edges: Sequence[tuple[str, str]],
    rates: Mapping[str, Sequence[InstanceRates]],
    source_rates: Mapping[str, float] | None,
) -> dict[str, float]:
    order = _topological_order(operators, edges)
    upstreams: dict[str, list[str]] = {name: [] for name in operators}
    for upstream, down in edges:
        upstreams[down].append(upstream)

    target_output: dict[str, float] = {}
    raw: dict[str, float] = {}
    for name in order:
        p_i = operators[name]
        instance_rates = rates[name]
        if not upstreams[name]:
            raw[name] = float(p_i)
            if source_rates is not None and name in source_rates:
                target_output[name] = source_rates[name]
            else:
                target_output[name] = sum(r.true_output for r in instance_rates)
            continue
        target_input = sum(target_output[u] for u in upstreams[name])
        true_processing = sum(r.true_processing for r in instance_rates)
        if true_processing == 0:
            if target_input > 0:
                raise ValueError(
                    f"operator {name!r} has a zero true processing rate but {target_input!r} "
                    "records/s of input arrive at the target rate"
                )
            raw_i = 0.0
        else:
            raw_i = target_input / (true_processing / p_i)
        raw[name] = raw_i
        target_output[name] = sum(r.true_output for r in instance_rates) * raw_i / p_i
    return {name: raw[name] for name in operators}


def decide(
    operators: Mapping[str, int],
    edges: Sequence[tuple[str, str]],
    rates: Mapping[str, Sequence[InstanceRates]],
    source_rates: Mapping[str, float] | None = None,
    over_provisioning: float = 0.0,
) -> dict[str, int]:
    """Each operator's optimal number of instances under DS2's model.

    Sources keep their current instances (their rate is the input, not a decision). Each edge carries
    its upstream's whole target output, so an operator's target input is the sum over its incoming
    edges. Raises :class:`ValueError` naming the culprit for a cycle, an operator without rates (or
    with a rate count different from its instances), a non-positive instance count, negative or
    non-finite rates, or a zero true processing rate where input arrives.
    """
    _validate(operators, edges, rates, source_rates, over_provisioning)
    has_upstream = {down for _, down in edges}
    raw = _raw(operators, edges, rates, source_rates)
    return {
        name: math.ceil(raw_i * (1 + over_provisioning)) if name in has_upstream else operators[name]
        for name, raw_i in raw.items()
    }
