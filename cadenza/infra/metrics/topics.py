"""The shape of the two metrics topics, for whoever creates the worker's topics.

Spans are high-volume samples nobody reads after the stats job has: a short retention keeps the
topic small. Feedback is keyed by (pipeline, operator, tenant) and only the newest record per key
matters, so the topic is compacted: a worker reading it from the beginning at start then reads about
one record per operator instead of the whole history.
"""

from __future__ import annotations

from cadenza.infra.kafka.topics import TopicSpec

__all__ = ["DEFAULT_FEEDBACK_TOPIC", "DEFAULT_SPANS_TOPIC", "metrics_topic_specs"]

DEFAULT_SPANS_TOPIC = "cadenza-spans"
DEFAULT_FEEDBACK_TOPIC = "cadenza-feedback"


def metrics_topic_specs(
    spans_topic: str = DEFAULT_SPANS_TOPIC,
    feedback_topic: str = DEFAULT_FEEDBACK_TOPIC,
    *,
    spans_partitions: int = 4,
    spans_retention_ms: int = 6 * 3600 * 1000,
    replication_factor: int = 1,
) -> list[TopicSpec]:
    """Specs for :func:`cadenza.infra.kafka.topics.ensure_topics`: the spans and feedback topics."""
    return [
        TopicSpec(
            spans_topic,
            partitions=spans_partitions,
            replication_factor=replication_factor,
            configs={"retention.ms": str(spans_retention_ms)},
        ),
        TopicSpec(
            feedback_topic,
            partitions=1,
            replication_factor=replication_factor,
            configs={"cleanup.policy": "compact"},
        ),
    ]
