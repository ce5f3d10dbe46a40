"""What a worker asks of the cluster before it joins: its topics, and its group's plan.

Missing topics are created (input, repartition, changelog, sink, dead-letter and late topics with the
partition counts the plan needs, and the metrics and control topics the settings name), the
co-partitioning of joined inputs is checked, and the group's recorded plan is compared with this
worker's pipelines (:mod:`.group_plan`), so that a worker of another plan is refused before it
commits anything.
"""

from __future__ import annotations

import logging

from confluent_kafka import KafkaException

from cadenza.analysis.kafka_trace import activities_topic_spec
from cadenza.infra.kafka.clients import make_admin
from cadenza.infra.kafka.errors import BrokerUnavailableError, from_kafka_exception
from cadenza.infra.kafka.topics import TopicSpec, ensure_topics
from cadenza.infra.metrics.topics import metrics_topic_specs
from cadenza.pipelines import PipelineGraph
from cadenza.scaling.ownership import ownership_topic_spec
from cadenza.settings import KafkaSettings
from cadenza.worker.config import WorkerConfig
from cadenza.worker.engine.topics import plan_topics
from cadenza.worker.engine.topology import SubTopology, check_copartitioned
from cadenza.worker.kafka.group_plan import GroupPlan, check_group_plan, groups_topic_spec
from cadenza.worker.reliability.quarantine_marks import quarantine_topic_spec

__all__ = ["prepare_cluster"]

_log = logging.getLogger("cadenza.worker")


def prepare_cluster(
    settings: KafkaSettings,
    config: WorkerConfig,
    group: str,
    worker_id: str,
    subtopologies: list[tuple[PipelineGraph, list[SubTopology]]],
) -> list[TopicSpec]:
    """Create what is missing, check the plan; returns the pipelines' topics with their partitions."""
    admin = make_admin(settings)
    timeout = settings.request_timeout_ms / 1000.0
    try:
        metadata = admin.list_topics(timeout=timeout)
    except KafkaException as exc:
        # The first call to the cluster: when no broker answers, the address is the likely cause.
        error = from_kafka_exception(
            exc, f"listing topics at {settings.bootstrap_servers} (CADENZA_BOOTSTRAP_SERVERS)"
        )
        if isinstance(error, BrokerUnavailableError):
            error = BrokerUnavailableError(
                f"{error} (no answer within {timeout:.0f} s); check that a broker listens at that "
                "address, or set CADENZA_BOOTSTRAP_SERVERS to one (`cadenza broker --detach` starts "
                "a local one)",
                code=error.code,
                retriable=error.retriable,
            )
        raise error from None
    existing = {
        name: len(topic.partitions)
        for name, topic in metadata.topics.items()
        if topic.error is None and topic.partitions
    }
    topics = plan_topics(subtopologies, existing, config.partitions)
    counts = {spec.name: spec.partitions for spec in topics}
    for graph, subs in subtopologies:
        check_copartitioned(graph, subs, counts)
    spans, feedback = config.spans_topic, config.feedback_topic
    metrics_topics = [
        spec
        for spec in metrics_topic_specs(spans or "cadenza-spans", feedback or "cadenza-feedback")
        if spec.name in (spans, feedback)
    ]
    if config.activities is not None:
        metrics_topics.append(activities_topic_spec(config.activities))
    control = [groups_topic_spec(), quarantine_topic_spec()]
    if config.ownership == "plan":
        control.append(ownership_topic_spec())
    created = ensure_topics(admin, [*topics, *metrics_topics, *control], timeout=timeout)
    if created:
        _log.info("created topics: %s", ", ".join(sorted(created)))
    # Before the subscription, so a worker of another plan is refused before it commits anything.
    graphs = [graph for graph, _ in subtopologies]
    check_group_plan(
        settings, admin, group, GroupPlan.of(graphs, worker_id), replace=config.replace_plan, timeout=timeout
    )
    return topics
