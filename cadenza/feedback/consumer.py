"""Reading the feedback topic into a worker's cost model.

**Every worker reads every feedback record.** Each worker schedules records of every pipeline it
hosts, so each needs every operator's statistics. The consumer therefore ``assign()``s all partitions
of the topic, from the beginning, instead of joining a consumer group: a shared group would split the
records among workers, and a group per worker would only add a join (seconds on some brokers) and
committed offsets nobody uses. Reading from the beginning lets a new worker start from the latest
known statistics at once; with the topic compacted by key (pipeline, operator, tenant), that read is
bounded by the number of operators. Partitions added to the topic later are picked up on restart.

**Which statistic feeds the cost model.** By default the mean run time, ``1 / true_processing_rate``
(busy seconds per record). Three reasons: path costs add operator costs along a path, and means add
(the mean of a sum is the sum of the means) while percentiles do not (summing p95s overstates the
path's p95 more with every operator); the worker's own in-process updates are an EWMA of single run
times, i.e. an estimate of the mean too, so feedback and local measurements agree on what they
estimate instead of dragging the estimate between two quantities; and busy time per record is what
bounds throughput, the quantity DS2 reasons about. ``statistic="p95"`` (or p50/p99) is available for
deployments that prefer conservative deadlines and accept that trade.

**Threads.** :class:`~cadenza.scheduling.CostModel` is not thread-safe and belongs to the executor.
The reading side (:meth:`FeedbackConsumer.poll`, on a background thread after :meth:`start`) only
decodes and validates, and leaves the newest statistics per operator in a small dict; the executor
calls :meth:`FeedbackConsumer.apply_pending` between quanta to fold them in. Keeping only the newest
record per operator bounds that hand-over by the number of operators, however far behind the
executor is.

**Bad records never crash a worker.** Undecodable records are counted ``malformed``; decodable ones
whose chosen statistic or count cannot be used are ``invalid``; windows older than one already seen
for the operator are ``outdated``. All are skipped.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import uuid
from enum import StrEnum
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, TopicPartition

from cadenza.feedback.records import KIND_HEADER, FeedbackRecord, decode_feedback
from cadenza.infra.kafka.clients import ClientErrors, make_consumer
from cadenza.infra.kafka.errors import TopicError, from_kafka_error
from cadenza.infra.kafka.headers import get_header
from cadenza.infra.lifecycle import Lifecycle
from cadenza.scheduling.costs import CostModel
from cadenza.schemas.errors import DecodeError
from cadenza.settings import KafkaSettings

__all__ = ["FeedbackConsumer", "RunTimeStatistic", "run_time_statistic"]

_log = logging.getLogger("cadenza.metrics.feedback")

_OperatorKey = tuple[str, str, str]  # (tenant, pipeline, operator): the metrics' label order


class RunTimeStatistic(StrEnum):
    """Which statistic of a feedback record becomes the operator's run-time estimate."""

    MEAN = "mean"
    P50 = "p50"
    P95 = "p95"
    P99 = "p99"


def run_time_statistic(record: FeedbackRecord, statistic: RunTimeStatistic | str) -> float | None:
    """The per-record run time ``record`` gives under ``statistic``, or None if it is unusable."""
    match RunTimeStatistic(statistic):
        case RunTimeStatistic.MEAN:
            value = record.mean_run_time
        case RunTimeStatistic.P50:
            value = record.run_time_p50
        case RunTimeStatistic.P95:
            value = record.run_time_p95
        case RunTimeStatistic.P99:
            value = record.run_time_p99
    if value is None or not (0.0 <= value < math.inf):
        return None
    return value


class FeedbackConsumer(Lifecycle):
    """Reads all of the feedback topic and hands the newest statistics per operator to the executor.

    Use ``start()`` for a background reader, or call ``poll()`` yourself; either way call
    ``apply_pending(cost_model)`` on the thread that owns the cost model.
    """

    def __init__(
        self,
        settings: KafkaSettings,
        topic: str,
        *,
        statistic: RunTimeStatistic | str = RunTimeStatistic.MEAN,
        poll_timeout: float = 0.5,
        **consumer_overrides: Any,
    ) -> None:
        self.topic = topic
        self.statistic = RunTimeStatistic(statistic)
        self._settings = settings
        self._poll_timeout = poll_timeout
        self._overrides = consumer_overrides
        self._consumer: Consumer | None = None
        self._client_errors: ClientErrors | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._pending: dict[_OperatorKey, tuple[FeedbackRecord, float]] = {}
        self._newest: dict[_OperatorKey, tuple[float, float]] = {}
        # Written by the reading thread only.
        self.received = 0
        #: Records of another ``cadenza-kind`` (a ``KIND_HEADER``), skipped as not statistics.
        self.other_kinds = 0
        self.malformed = 0
        self.invalid = 0
        self.outdated = 0
        self.superseded = 0
        self.consumer_errors = 0
        self.last_error: Exception | None = None
        # Written by the executor only (apply_pending).
        self._applied: dict[tuple[str, ...], int] = {}
        self.refused_by_model = 0

    # -- lifecycle -------------------------------------------------------------------------------

    def open(self, timeout: float = 30.0) -> list[int]:
        """Create the consumer and assign every partition from the beginning; return the partitions.

        Raises :class:`~cadenza.infra.kafka.errors.TopicError` if the topic does not exist: the
        worker creates it with its other topics, so a missing one is a configuration mistake.
        """
        if self._consumer is not None:
            return [tp.partition for tp in self._consumer.assignment()]
        overrides: dict[str, Any] = {"fetch.wait.max.ms": 100, **self._overrides}
        consumer, errors = make_consumer(
            self._settings, group_id=f"cadenza-feedback-{uuid.uuid4().hex}", **overrides
        )
        try:
            metadata = consumer.list_topics(self.topic, timeout=timeout)
            topic = metadata.topics.get(self.topic)
            if topic is None or topic.error is not None or not topic.partitions:
                detail = f": {topic.error}" if topic is not None and topic.error is not None else ""
                raise TopicError(
                    f"feedback topic {self.topic!r} does not exist{detail}; create it before starting "
                    "the feedback consumer (see cadenza.infra.metrics.metrics_topic_specs)"
                )
            partitions = sorted(topic.partitions)
            # assign() joins no group: no rebalance wait, and nothing is committed.
            consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in partitions])
        except BaseException:
            consumer.close()
            raise
        self._consumer, self._client_errors = consumer, errors
        return partitions

    def start(self, timeout: float = 30.0) -> None:
        """Open (see :meth:`open`) and read in a background thread until :meth:`close`."""
        self.open(timeout)
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="cadenza-feedback-reader", daemon=True)
        self._thread.start()

    @property
    def running(self) -> bool:
        thread = self._thread
        return thread is not None and thread.is_alive()

    def close(self, timeout: float = 5.0) -> None:
        thread = self._thread
        if thread is not None:
            self._stop.set()
            thread.join(timeout)
            self._thread = None
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            consumer.close()

    # -- reading side ----------------------------------------------------------------------------

    def poll(self, timeout: float = 0.0, max_records: int = 500) -> int:
        """Read what is available (waiting up to ``timeout``); return records read.

        Call it from one thread only (the background reader after :meth:`start`).
        """
        consumer = self._consumer
        if consumer is None:
            raise RuntimeError("feedback consumer is not open; call open() or start() first")
        if self._client_errors is not None:
            self._client_errors.raise_fatal()
        messages = consumer.consume(max_records, timeout)
        for message in messages:
            self._handle(message)
        return len(messages)

    def _handle(self, message: Message) -> None:
        error = message.error()
        if error is not None:
            if error.code() != KafkaError._PARTITION_EOF:
                self.consumer_errors += 1
                self.last_error = from_kafka_error(error, f"reading feedback topic {self.topic!r}")
                _log.warning("%s", self.last_error)
            return
        if get_header(message.headers(), KIND_HEADER) is not None:
            # another kind of record on the topic (a pool decision, a worker's true rates, a
            # critical-path summary), not statistics: not this reader's, and not malformed either
            self.other_kinds += 1
            return
        self.received += 1
        try:
            record = decode_feedback(message.value(), message.headers())
        except DecodeError as exc:
            self.malformed += 1
            _log.debug("skipping malformed feedback at %s[%s]@%s: %s", *_where(message), exc)
            return
        value = run_time_statistic(record, self.statistic)
        if value is None or record.count <= 0 or not record.window_start <= record.window_end:
            self.invalid += 1
            _log.debug("skipping unusable feedback at %s[%s]@%s: %r", *_where(message), record)
            return
        key = (record.tenant_id, record.pipeline_id, record.operator_id)
        version = (record.window_end, record.produced_at)
        newest = self._newest.get(key)
        if newest is not None and version <= newest:
            self.outdated += 1
            return
        self._newest[key] = version
        with self._lock:
            if key in self._pending:
                self.superseded += 1
            self._pending[key] = (record, value)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll(self._poll_timeout)
            except Exception as exc:
                self.consumer_errors += 1
                self.last_error = exc
                fatal = self._is_fatal()
                _log.error("feedback reader: %s%s", exc, "; stopping" if fatal else "")
                if fatal:
                    return
                self._stop.wait(min(1.0, self._poll_timeout))

    def _is_fatal(self) -> bool:
        """Whether librdkafka declared this consumer dead (then retrying is pointless)."""
        if self._client_errors is None:
            return False
        try:
            self._client_errors.raise_fatal()
        except Exception:
            return True
        return False

    # -- executor side ---------------------------------------------------------------------------

    @property
    def pending(self) -> int:
        """Operators with statistics waiting for :meth:`apply_pending`."""
        return len(self._pending)

    def pending_records(self) -> list[FeedbackRecord]:
        """The newest statistics per operator waiting for :meth:`apply_pending` (for display)."""
        with self._lock:
            return [record for record, _ in self._pending.values()]

    def apply_pending(self, cost_model: CostModel) -> int:
        """Fold the waiting statistics into ``cost_model``; return how many were applied.

        Call it on the thread that owns the cost model; it costs one dict check when nothing waits.
        The feedback's count weighs it against the current estimate (``CostModel.apply_feedback``),
        so a window of many records all but replaces the estimate. Statistics for an operator the
        model does not know yet are kept there, ready for when its pipeline is registered.
        """
        if not self._pending:
            return 0
        with self._lock:
            batch, self._pending = self._pending, {}
        applied = 0
        counts = self._applied
        for key, (record, value) in batch.items():
            if cost_model.apply_feedback(record.pipeline_id, record.operator_id, value, record.count):
                counts[key] = counts.get(key, 0) + 1
                applied += 1
            else:  # validated already, so only a model with stricter rules gets here
                self.refused_by_model += 1
        return applied

    # -- statistics ------------------------------------------------------------------------------

    @property
    def applied(self) -> int:
        return sum(self._applied.copy().values())

    def applied_by_operator(self) -> dict[tuple[str, ...], int]:
        """Applied counts keyed by (tenant, pipeline, operator), for ``cadenza_feedback_applied``."""
        return dict(self._applied.copy())

    def rejected_by_reason(self) -> dict[tuple[str, ...], int]:
        """Skipped records keyed by the ``reason`` label of ``cadenza_feedback_rejected``."""
        return {
            ("malformed",): self.malformed,
            ("invalid",): self.invalid + self.refused_by_model,
            ("outdated",): self.outdated,
        }

    def wait_for(self, received: int, timeout: float) -> bool:
        """Block until ``received`` records were read (or ``timeout``); for tests and tools."""
        deadline = time.monotonic() + timeout
        while self.received < received and time.monotonic() < deadline:
            if self.running:
                time.sleep(0.01)
            else:
                self.poll(0.1)
        return self.received >= received


def _where(message: Message) -> tuple[str | None, int | None, int | None]:
    return message.topic(), message.partition(), message.offset()
