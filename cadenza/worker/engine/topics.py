"""Which topics a worker needs, with how many partitions, and creating the missing ones.

Source and sink topics are the user's: an existing one is used as it is, a missing one is created
with the worker's default partition count. Internal topics follow their input: a repartition topic
gets as many partitions as the input of the sub-topology that writes it (the source's count, as in
Kafka Streams), and a changelog topic exactly as many as its operator's input, because changelog
partition ``p`` holds the state of input partition ``p`` (an existing changelog of another count is
refused before the worker joins its group). Changelogs are compacted. Dead-letter and
late topics get the default count.
"""

from __future__ import annotations

from collections.abc import Iterator

from cadenza.infra.kafka.errors import TopicError
from cadenza.infra.kafka.topics import TopicSpec
from cadenza.pipelines import PipelineGraph
from cadenza.worker.engine.topology import SubTopology, check_no_cycles_across

__all__ = ["changelogs", "plan_topics", "written_topics"]

_COMPACT = {"cleanup.policy": "compact"}


def plan_topics(
    graphs: list[tuple[PipelineGraph, list[SubTopology]]],
    existing: dict[str, int],
    default_partitions: int,
) -> list[TopicSpec]:
    """Every topic the pipelines need; ``existing`` maps topics that exist to their partition counts.

    Pipelines that would feed each other in a cycle are refused first (see
    :func:`~cadenza.worker.engine.topology.check_no_cycles_across`), before any topic is created for them.
    """
    check_no_cycles_across([graph for graph, _ in graphs])
    counts: dict[str, int] = {}
    configs: dict[str, dict[str, str]] = {}

    def want(topic: str, partitions: int, config: dict[str, str] | None = None) -> None:
        if topic not in counts:
            counts[topic] = existing.get(topic, partitions)
        if config:
            configs[topic] = config

    for graph, subtopologies in graphs:
        for topic in graph.source_topics:
            want(topic, default_partitions)
        for topic in graph.sink_topics:
            want(topic, default_partitions)
        # Sub-topologies come in topological order, so a repartition topic's count is known before the
        # sub-topology reading it asks for its own internal topics.
        for sub in subtopologies:
            partitions = counts[sub.input_topic]
            for topic in sub.repartition_topics:
                want(topic, partitions)
            for node_id, changelog in changelogs(graph, sub):
                want(changelog, partitions, _COMPACT)
                _check_changelog(
                    graph,
                    node_id,
                    changelog,
                    has=counts[changelog],
                    input_topic=sub.input_topic,
                    wanted=partitions,
                )
        want(graph.dead_letter_topic, default_partitions)
        want(graph.late_topic, default_partitions)
    return [TopicSpec(name, partitions=n, configs=configs.get(name, {})) for name, n in counts.items()]


def written_topics(graph: PipelineGraph, subtopologies: list[SubTopology]) -> set[str]:
    """Every topic a pipeline's steps write: sinks, repartition topics, changelogs, its dead-letter and
    late topics (what a produce lane routes, see :func:`cadenza.worker.kafka.lanes.plan_produce_lanes`)."""
    written = {*graph.sink_topics, graph.dead_letter_topic, graph.late_topic}
    for sub in subtopologies:
        written.update(sub.repartition_topics)
        written.update(changelog for _, changelog in changelogs(graph, sub))
    return written


def changelogs(graph: PipelineGraph, sub: SubTopology) -> Iterator[tuple[str, str]]:
    """(step, changelog topic) of each of ``sub``'s stateful steps that keeps a changelog."""
    for node_id in sub.stateful:
        changelog = graph.node(node_id).changelog_topic
        if changelog is not None:
            yield node_id, changelog


def _check_changelog(
    graph: PipelineGraph, node_id: str, changelog: str, *, has: int, input_topic: str, wanted: int
) -> None:
    """Refuse, before the group join, a changelog whose partitions do not match its input's.

    Changelog partition ``p`` holds the state of input partition ``p``: with fewer partitions the
    restore after the join fails on a partition that does not exist; with more, the state was written
    under another partitioning and would be restored to the wrong keys.
    """
    if has != wanted:
        raise TopicError(
            f"pipeline {graph.name!r}, step {node_id!r}: changelog topic {changelog!r} has {has} "
            f"partitions but its input {input_topic!r} has {wanted}; partition p of a changelog holds the "
            f"state of input partition p. Recreate the changelog with {wanted} partitions (its state is "
            "then rebuilt from nothing), or give the input its former partition count back"
        )
