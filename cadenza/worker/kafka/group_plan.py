"""One group, one plan: a worker whose pipelines differ from its group's is refused before it commits.

Workers of one consumer group split its topics' partitions. A worker running other pipelines in the
group would take partitions whose records its own pipelines never see, and commit them: those
records would be gone for the group's real pipelines. The default group is derived from the
pipelines (:func:`cadenza.worker.runtime.default_group`), so this cannot happen by accident; an
explicit ``--group`` needs a record of what the group runs.

That record is the group's *plan*: a fingerprint of its compiled pipelines (names, tenants, targets,
topics, steps and their parameters, windows; not the Python code of the functions, which has no
stable identity across processes) and the pipelines' names, in the compacted control topic
``cadenza-groups`` keyed by group. Before it subscribes, a worker reads the record of its group:

- none: it writes its own plan, then reads the topic again; if another plan was written meanwhile
  (two workers of different plans starting at once), the last written wins and the other refuses;
- the same fingerprint: it joins;
- another fingerprint, and the group has live members: it is refused (:class:`PlanMismatchError`,
  exit code 2 from ``cadenza worker``), having committed nothing;
- another fingerprint and no live member (every old worker stopped: a deliberate upgrade), or
  ``replace_plan``: its plan replaces the record, logged as a WARNING.

``replace_plan`` (``--replace-plan``) is for an upgrade while the broker still counts a member, e.g.
a SIGKILLed old worker whose session has not expired: the old workers must be stopped all the same.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from confluent_kafka import ConsumerGroupState, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from cadenza.errors import ConfigError
from cadenza.infra.kafka.clients import DeliveryReport, flush_or_raise, make_consumer, make_producer
from cadenza.infra.kafka.errors import KafkaClientError
from cadenza.infra.kafka.offsets import end_offsets
from cadenza.infra.kafka.topics import TopicSpec
from cadenza.pipelines import PipelineGraph
from cadenza.settings import KafkaSettings

__all__ = [
    "GROUPS_TOPIC",
    "GroupPlan",
    "PlanMismatchError",
    "check_group_plan",
    "decide_plan",
    "groups_topic_spec",
    "plan_fingerprint",
]

GROUPS_TOPIC = "cadenza-groups"

_log = logging.getLogger("cadenza.worker")

#: Group states in which the broker counts live members.
_EMPTY_STATES = frozenset({ConsumerGroupState.EMPTY, ConsumerGroupState.DEAD})


def groups_topic_spec(topic: str = GROUPS_TOPIC) -> TopicSpec:
    """The control topic's shape: one partition (a handful of small records), compacted by group."""
    return TopicSpec(topic, partitions=1, configs={"cleanup.policy": "compact"})


def plan_fingerprint(graphs: Sequence[PipelineGraph]) -> str:
    """A stable hash of what the pipelines do, independent of their order and of the process.

    The compiled graphs' JSON holds names, tenants, weights, targets, topics, steps with their
    parameters (windows included) and edges; the functions are excluded from it.
    """
    dumped = sorted((graph.model_dump(mode="json") for graph in graphs), key=lambda graph: str(graph["name"]))
    canonical = json.dumps(dumped, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(frozen=True)
class GroupPlan:
    """What a group runs, as recorded in the control topic."""

    fingerprint: str
    pipelines: tuple[str, ...]
    worker: str = ""

    @classmethod
    def of(cls, graphs: Sequence[PipelineGraph], worker: str = "") -> GroupPlan:
        return cls(plan_fingerprint(graphs), tuple(sorted(graph.name for graph in graphs)), worker)

    def encode(self) -> bytes:
        return json.dumps(
            {"fingerprint": self.fingerprint, "pipelines": list(self.pipelines), "worker": self.worker}
        ).encode()

    @classmethod
    def decode(cls, raw: bytes) -> GroupPlan | None:
        """The plan in a record, or None for a record that is not one (written by something else)."""
        try:
            data = json.loads(raw)
            fingerprint, pipelines = data["fingerprint"], data["pipelines"]
            if not isinstance(fingerprint, str) or not all(isinstance(p, str) for p in pipelines):
                return None
            return cls(fingerprint, tuple(pipelines), str(data.get("worker", "")))
        except (ValueError, KeyError, TypeError):
            return None


class PlanMismatchError(ConfigError):
    """The group runs other pipelines than this worker's (exit code 2 from ``cadenza worker``)."""

    def __init__(self, group: str, recorded: GroupPlan, mine: GroupPlan) -> None:
        self.group = group
        self.recorded = recorded
        self.mine = mine
        super().__init__(
            f"group {group!r} runs pipelines [{', '.join(recorded.pipelines)}] but this worker runs "
            f"[{', '.join(mine.pipelines)}] (another plan); refused before committing anything. Give "
            "this worker another --group, or stop the group's old workers first (an upgrade: the plan "
            "is replaced once the group has no live member, or at once with --replace-plan)"
        )


Decision = Literal["join", "write", "replace", "refuse"]


def decide_plan(recorded: GroupPlan | None, mine: GroupPlan, *, live: bool, replace: bool) -> Decision:
    """What a starting worker does with its group's recorded plan (see the module docstring)."""
    if recorded is None:
        return "write"
    if recorded.fingerprint == mine.fingerprint:
        return "join"
    if replace or not live:
        return "replace"
    return "refuse"


def check_group_plan(
    settings: KafkaSettings,
    admin: AdminClient,
    group: str,
    mine: GroupPlan,
    *,
    replace: bool = False,
    topic: str = GROUPS_TOPIC,
    timeout: float = 30.0,
) -> Decision:
    """Check this worker's plan against its group's record, recording it if needed; raise if refused.

    Call it after the control topic exists and before the worker subscribes.
    """
    recorded = _read_plan(settings, topic, group, timeout)
    other = recorded is not None and recorded.fingerprint != mine.fingerprint
    live = other and _has_members(admin, group, timeout)
    decision = decide_plan(recorded, mine, live=live, replace=replace)
    if decision == "refuse":
        assert recorded is not None
        raise PlanMismatchError(group, recorded, mine)
    if decision == "join":
        return decision
    if decision == "replace":
        assert recorded is not None
        _log.warning(
            "group %s: replacing its plan [%s] with this worker's [%s] (%s)",
            group,
            ", ".join(recorded.pipelines),
            ", ".join(mine.pipelines),
            "--replace-plan" if replace else "the group has no live member",
        )
    _write_plan(settings, topic, group, mine, timeout)
    # Two workers of different plans may have written at once: the record read back decides.
    after = _read_plan(settings, topic, group, timeout)
    if after is not None and after.fingerprint != mine.fingerprint:
        raise PlanMismatchError(group, after, mine)
    return decision


def _has_members(admin: AdminClient, group: str, timeout: float) -> bool:
    """Whether the broker counts live members in the group (an unknown answer counts as yes)."""
    try:
        description = admin.describe_consumer_groups([group], request_timeout=timeout)[group].result(timeout)
    except KafkaException as exc:
        _log.warning("group %s: cannot tell whether it has live members (%s); assuming it has", group, exc)
        return True
    return bool(description.members) or description.state not in _EMPTY_STATES


def _write_plan(settings: KafkaSettings, topic: str, group: str, plan: GroupPlan, timeout: float) -> None:
    producer, errors = make_producer(settings)
    report = DeliveryReport()
    producer.produce(topic, plan.encode(), group.encode(), on_delivery=report)
    flush_or_raise(producer, report, timeout)
    errors.raise_fatal()


def _read_plan(settings: KafkaSettings, topic: str, group: str, timeout: float) -> GroupPlan | None:
    """The last plan recorded for ``group`` (the control topic read to its true end)."""
    end = end_offsets(settings, [(topic, 0)], timeout)[(topic, 0)]
    if end <= 0:
        return None
    consumer, errors = make_consumer(
        settings, f"cadenza-groups-reader-{uuid.uuid4().hex}", **{"fetch.wait.max.ms": 50}
    )
    key = group.encode()
    found: GroupPlan | None = None
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + timeout
        position = 0
        while position < end:
            if time.monotonic() > deadline:
                raise KafkaClientError(f"could not read {topic!r} to its end within {timeout:.0f} s")
            errors.raise_fatal()
            message = consumer.poll(0.2)
            if message is None or message.error() is not None:
                continue
            offset = message.offset()
            position = max(position, (offset if offset is not None else position) + 1)
            if message.key() == key:
                value = message.value()
                found = None if value is None else GroupPlan.decode(value)
        return found
    finally:
        consumer.close()
