"""What a worker runs, planned before it meets a broker: its pipelines checked and compiled, their
sub-topologies, and the fetch and produce lanes their latency targets call for.

Everything here is a function of the pipelines and the settings, so it is done at construction,
where a mistake (an unsupported step, two pipelines of one name, a setting that cannot work) is
refused at once, naming what is wrong.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from cadenza.errors import CadenzaError, ConfigError
from cadenza.pipelines import Pipeline, PipelineGraph
from cadenza.scheduling.policy import SchedulingPolicy
from cadenza.scheduling.registry import resolve_policy
from cadenza.settings import KafkaSettings
from cadenza.worker.config import WorkerConfig
from cadenza.worker.engine.topics import written_topics
from cadenza.worker.engine.topology import SubTopology, join_inputs, split
from cadenza.worker.kafka.lanes import (
    Lane,
    ProduceLane,
    joint_targets,
    plan_lanes,
    plan_produce_lanes,
    topic_targets,
)

__all__ = ["WorkerLayout", "default_group", "make_policy"]


def make_policy(policy: str | SchedulingPolicy, graphs: Sequence[PipelineGraph]) -> SchedulingPolicy:
    """The policy object for a name or import path, given its pipelines' tenant weights; a policy
    object as it is (both checked against the contract, see :func:`resolve_policy`)."""
    return resolve_policy(policy, {g.tenant: g.tenant_weight for g in graphs})


def default_group(graphs: Sequence[PipelineGraph]) -> str:
    """The consumer group a worker joins when none is given: ``cadenza-`` and its pipelines' names.

    Workers in one group split its topics' partitions; a worker running other pipelines in the same
    group takes partitions whose records its own pipelines never see, and commits them: they are
    gone. Deriving the group from the pipelines makes that impossible by accident (two modules
    started with the default group get two groups). Long name lists are shortened to a digest.
    """
    joined = "+".join(sorted(graph.name for graph in graphs))
    if len(joined) <= 200:
        return f"cadenza-{joined}"
    return f"cadenza-{hashlib.sha256(joined.encode()).hexdigest()[:32]}"


@dataclass(frozen=True)
class WorkerLayout:
    graphs: list[PipelineGraph]
    subtopologies: list[tuple[PipelineGraph, list[SubTopology]]]
    #: The fetch lanes, most urgent first (one: a single consumer, as without lanes).
    lanes: list[Lane]
    #: The producers, most urgent first: one per fetch lane that has topics to write.
    produce_lanes: list[ProduceLane]
    #: Whether a pipeline joins (the range assignor keeps joined partitions together).
    joins: bool
    #: Whether the topics' latency targets differ: a partition is then paused at its fair share of
    #: the buffer (:class:`~cadenza.worker.kafka.fetcher.FlowControl`).
    shares: bool

    @classmethod
    def of(
        cls, pipelines: Sequence[Pipeline | PipelineGraph], config: WorkerConfig, settings: KafkaSettings
    ) -> WorkerLayout:
        if not pipelines:
            raise CadenzaError("the worker has no pipeline to run")
        if config.max_poll_interval * 1000 < settings.session_timeout_ms:
            raise ConfigError(
                f"max_poll_interval ({config.max_poll_interval:g} s) must be at least the session timeout "
                f"({settings.session_timeout_ms} ms)"
            )
        graphs = [p.compile() if isinstance(p, Pipeline) else p for p in pipelines]
        joins = any(node.kind == "join" for graph in graphs for node in graph.nodes)
        if config.ownership == "plan" and joins:
            # A join's state partition p is fed by partition p of both inputs; the plan moves input
            # partitions one at a time, so for a while two workers would write that state.
            raise ConfigError("ownership 'plan' does not run joins yet; use ownership 'group'")
        names = [g.name for g in graphs]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise CadenzaError(f"pipelines {duplicates} are declared more than once; names must be unique")
        subtopologies = [(g, split(g)) for g in graphs]
        readers = [(sub.input_topic, g.latency_target_s) for g, subs in subtopologies for sub in subs]
        joined = [topics for g, subs in subtopologies for topics in join_inputs(g, subs).values()]
        targets = joint_targets(topic_targets(readers), joined)
        lanes = plan_lanes(targets, config.lanes, config.fetch_wait_ms / 1000.0)
        writers = [
            (topic, g.latency_target_s) for g, subs in subtopologies for topic in written_topics(g, subs)
        ]
        produce_lanes = plan_produce_lanes(writers, lanes, settings.linger_ms)
        return cls(graphs, subtopologies, lanes, produce_lanes, joins, len(set(targets.values())) > 1)

    @property
    def input_topics(self) -> list[str]:
        return list(dict.fromkeys(s.input_topic for _, subs in self.subtopologies for s in subs))

    def describe(self, group: str, policy: str) -> str:
        """A human summary: pipelines, tenants, sub-topologies and topics."""
        lines = [f"group {group}: {len(self.graphs)} pipeline(s), policy {policy}"]
        for graph, subs in self.subtopologies:
            lines.append(
                f"  pipeline {graph.name} (tenant {graph.tenant}, weight {graph.tenant_weight:g}, "
                f"latency target {graph.latency_target_s:g}s)"
            )
            for sub in subs:
                writes = ", ".join([*sub.repartition_topics, *sub.sink_topics]) or "-"
                steps = " -> ".join(n for n in sub.nodes if n != sub.entry)
                lines.append(f"    reads {sub.input_topic} ({sub.input_kind}) -> {steps} -> writes {writes}")
            lines.append(f"    dead letters -> {graph.dead_letter_topic}; late records -> {graph.late_topic}")
        return "\n".join(lines)

    def reads(self) -> str:
        """The lanes and their topics, for the start's log line."""
        if len(self.lanes) == 1:
            return ", ".join(self.input_topics)
        lanes = "; ".join(
            f"{lane.name} (target {lane.target:g}s): {', '.join(lane.topics)}" for lane in self.lanes
        )
        if len(self.produce_lanes) > 1:
            lanes += "; producers: " + "; ".join(
                f"{lane.name} (linger {lane.linger_ms} ms): {', '.join(lane.topics)}"
                for lane in self.produce_lanes
            )
        return lanes
