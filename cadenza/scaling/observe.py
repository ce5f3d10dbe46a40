"""What the pool feeds DS2: the dataflow of sub-topologies and each worker's measured rates.

DS2 sees one operator per sub-topology (named ``pipeline/input topic``, the label the workers export)
and one source per external input topic (``pipeline/source:topic``), whose target rate is the rate
records arrive at. Edges follow the topics: a source topic feeds the sub-topology reading it, and a
sub-topology feeds the one reading each of its repartition topics.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from cadenza.infra.metrics import names
from cadenza.infra.metrics.scrape import Exposition, parse, sample_values
from cadenza.scaling.controller import RateWindow
from cadenza.scaling.ds2 import InstanceRates

__all__ = ["Dataflow", "dataflow", "parse_rates", "rate_window"]

SubKey = tuple[str, str]
"""(pipeline, input topic) of a sub-topology."""


class SubTopology(Protocol):
    """What DS2's graph needs of a sub-topology: the topic it reads, whether that is a source or a
    repartition topic, and the topics it repartitions to.

    The worker's :class:`cadenza.worker.engine.topology.SubTopology` is one; the pool, which the
    worker imports for its rates and ownership, names none of the worker's types.
    """

    @property
    def input_topic(self) -> str: ...

    @property
    def input_kind(self) -> str: ...

    @property
    def repartition_topics(self) -> tuple[str, ...]: ...


@dataclass(frozen=True)
class Dataflow:
    """DS2's graph over sub-topologies: operator names, edges, and where names come from."""

    sub_topologies: dict[str, SubKey]
    """DS2 operator name -> (pipeline, input topic) of each sub-topology."""
    sources: dict[str, str]
    """DS2 operator name -> external input topic of each source."""
    edges: list[tuple[str, str]]


def _sub_name(pipeline: str, topic: str) -> str:
    return f"{pipeline}/{topic}"


def dataflow(pipelines: Iterable[tuple[str, Sequence[SubTopology]]]) -> Dataflow:
    """The DS2 graph of ``(pipeline name, its sub-topologies)``."""
    subs: dict[str, SubKey] = {}
    sources: dict[str, str] = {}
    edges: list[tuple[str, str]] = []
    for pipeline, sub_topologies in pipelines:
        for sub in sub_topologies:
            name = _sub_name(pipeline, sub.input_topic)
            subs[name] = (pipeline, sub.input_topic)
            if sub.input_kind == "source":
                source = f"{pipeline}/source:{sub.input_topic}"
                sources[source] = sub.input_topic
                edges.append((source, name))
            for topic in sub.repartition_topics:
                edges.append((name, _sub_name(pipeline, topic)))
    return Dataflow(subs, sources, edges)


def parse_rates(exposition: Exposition) -> dict[SubKey, InstanceRates]:
    """One worker's rate gauges (see :mod:`cadenza.worker.tuning.rates`) from its ``/metrics`` text."""
    fields = {
        names.TRUE_PROCESSING_RATE.name: "true_processing",
        names.TRUE_OUTPUT_RATE.name: "true_output",
        names.OBSERVED_PROCESSING_RATE.name: "observed_processing",
        names.OBSERVED_OUTPUT_RATE.name: "observed_output",
    }
    samples = parse(exposition) if isinstance(exposition, str) else exposition
    values: dict[SubKey, dict[str, float]] = {}
    for name, field in fields.items():
        for (pipeline, sub_topology), value in sample_values(
            samples, name, ("pipeline", "sub_topology")
        ).items():
            values.setdefault((pipeline, sub_topology), {})[field] = value
    return {
        key: InstanceRates(
            v.get("true_processing", 0.0),
            v.get("true_output", 0.0),
            v.get("observed_processing", 0.0),
            v.get("observed_output", 0.0),
        )
        for key, v in values.items()
    }


def rate_window(
    flow: Dataflow,
    workers: Sequence[Mapping[SubKey, InstanceRates]],
    arrival_rates: Mapping[str, float],
    partitions: Mapping[str, int],
) -> RateWindow:
    """DS2's inputs from every worker's rates, each source topic's arrival rate and partition counts.

    A sub-topology's instances are the workers that did useful work on it in the window: a worker
    that owns none of its partitions measures nothing, and counting it would halve the capacity DS2
    infers per instance. With no such worker the sub-topology is one instance with zero rates (DS2
    then refuses to decide if input arrives: there is nothing to infer a capacity from yet).
    """
    operators: dict[str, int] = {}
    rates: dict[str, list[InstanceRates]] = {}
    for name in flow.sources:
        operators[name] = 1
        rates[name] = [InstanceRates(0.0, 0.0)]
    for name, key in flow.sub_topologies.items():
        busy = [w[key] for w in workers if key in w and w[key].true_processing > 0]
        rates[name] = busy or [InstanceRates(0.0, 0.0)]
        operators[name] = len(rates[name])
    source_rates = {name: arrival_rates.get(topic, 0.0) for name, topic in flow.sources.items()}
    sub_partitions = {name: partitions[topic] for name, (_, topic) in flow.sub_topologies.items()}
    return RateWindow(operators, flow.edges, rates, sub_partitions, source_rates)
