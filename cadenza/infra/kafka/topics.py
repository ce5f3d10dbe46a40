"""Idempotent topic creation.

Workers create the topics their pipelines need (sources, repartition, changelog, dead-letter...) at
start, and several workers may start at once, so "already exists" is success. An existing topic with
fewer partitions than asked for is an error, not a warning: keyed state and per-partition ordering
depend on the partition count, and silently running on a different one corrupts results.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from cadenza.infra.kafka.errors import TopicError, from_kafka_exception


@dataclass(frozen=True)
class TopicSpec:
    """What a topic must look like; ``configs`` are topic-level settings such as cleanup.policy."""

    name: str
    partitions: int = 1
    replication_factor: int = 1
    configs: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.name or len(self.name) > 249:
            raise TopicError(f"topic name {self.name!r} must be 1..249 characters")
        if self.partitions < 1:
            raise TopicError(f"topic {self.name!r}: partitions must be >= 1, got {self.partitions}")
        if self.replication_factor < 1:
            raise TopicError(f"topic {self.name!r}: replication factor must be >= 1")


def ensure_topics(admin: AdminClient, specs: list[TopicSpec], timeout: float = 30.0) -> list[str]:
    """Create the topics that are missing, check the rest; return the names that were created.

    Returns only once every topic is visible in the cluster metadata, so a producer or consumer
    created right after does not race the creation.
    """
    if not specs:
        return []
    futures = admin.create_topics(
        [
            NewTopic(
                s.name, num_partitions=s.partitions, replication_factor=s.replication_factor, config=s.configs
            )
            for s in specs
        ],
        request_timeout=timeout,
        operation_timeout=timeout,
    )
    created: list[str] = []
    for name, future in futures.items():
        try:
            future.result(timeout=timeout)
            created.append(name)
        except KafkaException as exc:
            error = exc.args[0]
            if isinstance(error, KafkaError) and error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                continue
            raise TopicError(str(from_kafka_exception(exc, f"creating topic {name!r}"))) from None
    _wait_visible(admin, specs, timeout)
    return created


def _wait_visible(admin: AdminClient, specs: list[TopicSpec], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    pending = {s.name: s for s in specs}
    while pending:
        metadata = admin.list_topics(timeout=max(0.5, min(5.0, deadline - time.monotonic())))
        for name in list(pending):
            topic = metadata.topics.get(name)
            if topic is None or topic.error is not None or not topic.partitions:
                continue
            actual = len(topic.partitions)
            wanted = pending[name].partitions
            if actual < wanted:
                raise TopicError(
                    f"topic {name!r} exists with {actual} partition(s) but {wanted} are required; "
                    "increase its partitions or use another topic name"
                )
            del pending[name]
        if not pending:
            return
        if time.monotonic() >= deadline:
            raise TopicError(f"topics {sorted(pending)} did not appear in metadata within {timeout:.0f}s")
        time.sleep(0.05)


def delete_topics(admin: AdminClient, names: list[str], timeout: float = 30.0) -> None:
    """Delete topics; a topic that does not exist is not an error."""
    if not names:
        return
    for name, future in admin.delete_topics(names, operation_timeout=timeout).items():
        try:
            future.result(timeout=timeout)
        except KafkaException as exc:
            error = exc.args[0]
            if isinstance(error, KafkaError) and error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                continue
            raise TopicError(str(from_kafka_exception(exc, f"deleting topic {name!r}"))) from None
