"""Every metric cadenza exports, declared once: name, kind, labels, buckets and meaning.

Dashboards, alerts and the Spark stats job are written against these names, so they live in one
module (as Sentry's Arroyo does with its metric definitions) instead of as string literals next to
each ``inc()``: a rename is one diff here, and a test checks that the docs list every one of them.

Conventions (Prometheus'): names are ``cadenza_<what>``; durations are seconds (``_seconds``);
counter names are given without the ``_total`` suffix, which the exposition adds. Labels:

- ``tenant``, ``pipeline``, ``operator``: the operator a record ran at (or was handed to). These three
  are the key of every per-record series, so one set of pre-bound series per operator serves them all.
- ``reason``: why something was dropped or refused, from a small fixed set named in each docstring.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = [
    "ALL_METRICS",
    "BROKER_REACHABLE",
    "BUFFERED_RECORDS",
    "CONSUMER_LAG",
    "CONTEXT_HEADERS_GARBLED",
    "CONTEXT_HEADERS_MISSING",
    "CONTEXT_HEADERS_REJECTED",
    "DEADLINES_MET",
    "DEADLINES_MISSED",
    "E2E_LATENCY",
    "FEEDBACK_APPLIED",
    "FEEDBACK_REJECTED",
    "FEEDBACK_SUPERSEDED",
    "FETCH_LATENCY",
    "KAFKA_CLIENT_ERRORS",
    "KAFKA_REQUESTS",
    "LATENCY_BUCKETS",
    "LATENCY_TARGET",
    "LESSEES",
    "LESSEE_ABANDONED",
    "LESSEE_DEATHS",
    "LESSEE_HANDED_CALLS",
    "LESSEE_HANDOFF_SECONDS",
    "LESSEE_LEASES",
    "LESSEE_MERGE_SECONDS",
    "LESSEE_RELEASES",
    "LESSEE_SECONDS",
    "LESSEE_TIMEOUTS",
    "LESSOR_CALLS",
    "OBSERVED_OUTPUT_RATE",
    "OBSERVED_PROCESSING_RATE",
    "OPERATOR_LABELS",
    "PARTITION_BUFFERED_RECORDS",
    "PAUSED_PARTITIONS",
    "PIPELINE_STOPPED",
    "PLANNED_HOP",
    "POOL_DESIRED_WORKERS",
    "POOL_WORKERS",
    "PRODUCE_ACK",
    "QUEUE_WAIT",
    "RECORDS_CONSUMED",
    "RECORDS_DEAD_LETTERED",
    "RECORDS_LATE",
    "RECORDS_PROCESSED",
    "RECORDS_PRODUCED",
    "RECORDS_QUARANTINED",
    "REPARTITION_HOP",
    "RUN_TIME",
    "SPANS_DROPPED",
    "SPANS_PRODUCED",
    "SUBTOPOLOGY_LABELS",
    "TRUE_OUTPUT_RATE",
    "TRUE_PROCESSING_RATE",
    "WATERMARK_IDLE_TIMEOUTS",
    "WINDOW_CLOSE_WAIT",
    "WORKER_RESTARTS",
    "WORKER_STALLS",
    "WORKER_STALL_SECONDS",
    "MetricDef",
    "MetricKind",
]


class MetricKind(StrEnum):
    COUNTER = "counter"
    GAUGE = "gauge"
    HISTOGRAM = "histogram"


@dataclass(frozen=True, slots=True)
class MetricDef:
    """One exported metric. ``help`` is the one-line HELP text scrapers show."""

    name: str
    kind: MetricKind
    help: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()
    """Upper bounds of a histogram's buckets, ascending; ``+Inf`` is implied."""

    @property
    def sample_name(self) -> str:
        """The name as it appears in the exposition (counters gain ``_total``)."""
        return f"{self.name}_total" if self.kind is MetricKind.COUNTER else self.name


OPERATOR_LABELS: tuple[str, str, str] = ("tenant", "pipeline", "operator")
"""The label set of every per-record series."""

LATENCY_BUCKETS: tuple[float, ...] = (
    0.00005,
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    300.0,
)
"""From 50 us (a cheap Python operator) to 5 minutes (a bulk tenant's lag): one set for run time,
queue wait and end-to-end latency, so the three can be compared bucket by bucket on one dashboard."""

_C = MetricKind.COUNTER
_G = MetricKind.GAUGE
_H = MetricKind.HISTOGRAM
_TPO = OPERATOR_LABELS

# -- records ---------------------------------------------------------------------------------------

RECORDS_CONSUMED = MetricDef(
    "cadenza_records_consumed", _C, "Records fetched from Kafka and handed to an operator.", _TPO
)
"""Counted at the operator a fetched record is first handed to (a pipeline's source or the reader of
a repartition topic). Against ``RECORDS_PROCESSED`` of the same operator it shows the backlog."""

RECORDS_PROCESSED = MetricDef(
    "cadenza_records_processed", _C, "Records an operator ran (one per execution).", _TPO
)
"""One per operator execution of a record: the throughput per operator, and the count behind the
``RUN_TIME`` and ``QUEUE_WAIT`` histograms."""

RECORDS_PRODUCED = MetricDef(
    "cadenza_records_produced", _C, "Records written to sink and repartition topics.", _TPO
)
"""Labelled with the operator that emitted them. Dead-letter, late, changelog and metrics records are
not counted here: they are not results."""

RECORDS_DEAD_LETTERED = MetricDef(
    "cadenza_records_dead_lettered",
    _C,
    "Records sent to a dead-letter topic instead of being processed.",
    (*_TPO, "reason"),
)
"""``reason``: ``decode`` (the value did not decode or validate), ``function`` (a user function
raised), ``context`` (a notice: the ``cadenza-ctx`` header was garbled, so the record ran with a fresh
context and was also copied to the dead-letter topic; ``cadenza_context_headers_garbled`` counts it
too) or ``quarantined`` (a poison pill, see ``RECORDS_QUARANTINED``). Dead letters are committed like
any record, so only this counter says they happened."""

RECORDS_LATE = MetricDef(
    "cadenza_records_late",
    _C,
    "Records that arrived after their window closed (sent to the late topic).",
    _TPO,
)
"""One per (record, window it missed). A rising rate means the allowed lateness is too small for the
sources' disorder."""

CONTEXT_HEADERS_MISSING = MetricDef(
    "cadenza_context_headers_missing",
    _C,
    "Records without a cadenza-ctx header, given a fresh scheduling context.",
    _TPO,
)
"""Normal for records read straight from a source topic; on a repartition topic it means a producer
outside cadenza writes to it, and those records lose their original deadline."""

CONTEXT_HEADERS_GARBLED = MetricDef(
    "cadenza_context_headers_garbled",
    _C,
    "Records whose cadenza-ctx header did not decode, given a fresh scheduling context.",
    _TPO,
)
"""Never normal: some producer writes bad headers (or a newer layout version this worker cannot
read). The record still runs, with a deadline counted from now, and a copy of it goes to the
pipeline's dead-letter topic as a notice (``ContextHeaderError``) naming where it was read."""

CONTEXT_HEADERS_REJECTED = MetricDef(
    "cadenza_context_headers_rejected",
    _C,
    "Records whose valid cadenza-ctx header was not trusted, given a fresh scheduling context.",
    _TPO,
)
"""A context claiming this pipeline on a source not declared ``trusted_context=True``, or claiming
another pipeline or tenant than the one reading it: a producer choosing its own priority (see
``docs/operations/reliability.md``, trust model). The record runs with a fresh context and keeps its
trace id."""

# -- deadlines and latency -------------------------------------------------------------------------

DEADLINES_MET = MetricDef(
    "cadenza_deadlines_met", _C, "Sink results emitted by their deadline t_F + L.", _TPO
)
"""Counted at sink operators only. With ``DEADLINES_MISSED`` it gives the deadline-met ratio per
tenant, the headline number of benchmark S1."""

DEADLINES_MISSED = MetricDef(
    "cadenza_deadlines_missed", _C, "Sink results emitted after their deadline t_F + L.", _TPO
)
"""Counted at sink operators only; see ``DEADLINES_MET``."""

QUEUE_WAIT = MetricDef(
    "cadenza_queue_wait_seconds",
    _H,
    "Seconds a record waited in its operator-partition queue before it ran.",
    _TPO,
    LATENCY_BUCKETS,
)
"""What the scheduler controls: a policy that orders well keeps this low for tight-deadline tenants
and lets it grow for loose ones."""

RUN_TIME = MetricDef(
    "cadenza_run_time_seconds", _H, "Seconds an operator spent on one record.", _TPO, LATENCY_BUCKETS
)
"""The per-record cost the cost model estimates; its distribution shows whether the mean the model
uses is representative."""

E2E_LATENCY = MetricDef(
    "cadenza_e2e_latency_seconds",
    _H,
    "Seconds from t_F to the emission of a sink result.",
    _TPO,
    LATENCY_BUCKETS,
)
"""Observed at sink operators only: result emitted minus ``t_F`` (the arrival of the input it depends
on, or the window's expected close), the latency a pipeline's target ``L`` bounds."""

# -- where a record's latency goes, stage by stage ---------------------------------------------------

FETCH_LATENCY = MetricDef(
    "cadenza_fetch_latency_seconds",
    _H,
    "Seconds from a source record's Kafka timestamp to its entering the worker's scheduler.",
    _TPO,
    LATENCY_BUCKETS,
)
"""Observed at the operator a source record is handed to: the producer's linger and acknowledgement,
the broker, the consumer's fetch wait and the records queued before it in the client. Measured
against the record's timestamp (CreateTime unless the topic stamps LogAppendTime), so a producer
whose clock is off shifts it. Exported once observed."""

REPARTITION_HOP = MetricDef(
    "cadenza_repartition_hop_seconds",
    _H,
    "Seconds from a key_by writing a record to its repartition topic to the record entering a scheduler.",
    _TPO,
    LATENCY_BUCKETS,
)
"""Observed at the operator reading the repartition topic: the upstream producer's linger and
acknowledgement, the broker and this worker's fetch, the second crossing of Kafka a repartition
costs. Progress records are not counted. Exported once observed."""

PRODUCE_ACK = MetricDef(
    "cadenza_produce_ack_seconds",
    _H,
    "Seconds from producing a sink or repartition record to the broker acknowledging it.",
    _TPO,
    LATENCY_BUCKETS,
)
"""Labelled with the sink or key_by that produced the record (a key_by's progress records count too):
librdkafka's own measure of the record's time in the producer (linger, batching, the request and its
acknowledgement). Exported once observed."""

WINDOW_CLOSE_WAIT = MetricDef(
    "cadenza_window_close_wait_seconds",
    _H,
    "Seconds from a window's end plus out-of-orderness and lateness, as wall-clock time, to its closing.",
    _TPO,
    LATENCY_BUCKETS,
)
"""Observed at window steps per result: how long the watermark took to pass a window after the
earliest wall-clock moment it could have (its end plus ``max_out_of_orderness`` and the allowed
lateness). Meaningful when event time is wall-clock time (sources that stamp records as they send
them); a backlog of old records observes large values and a source ahead of the clock none. Time
spent here is waiting for the slowest input partition (or its progress record). Exported once
observed."""

LATENCY_TARGET = MetricDef(
    "cadenza_latency_target_seconds",
    _G,
    "The pipeline's latency target L: a sink result is due by t_F + L.",
    ("tenant", "pipeline"),
)
"""Constant per pipeline, exported so a dashboard can draw the target line next to the
``E2E_LATENCY`` quantiles without being told the pipelines' configuration."""

PLANNED_HOP = MetricDef(
    "cadenza_planned_hop_seconds",
    _G,
    "The repartition hop into the operator that start deadlines upstream of it count (the "
    "hop_quantile of cadenza_repartition_hop_seconds over its last 10 s).",
    _TPO,
)
"""Exported for the readers of repartition topics while hops are planned (``hop_quantile`` > 0); 0
until enough records have crossed the hop. Set beside the measured hop it shows what the scheduler
assumes."""

# -- worker state ----------------------------------------------------------------------------------

BUFFERED_RECORDS = MetricDef(
    "cadenza_buffered_records", _G, "Records fetched and waiting in the worker's buffer."
)
"""Bounded by the fetcher; near the bound the fullest partitions are paused (``PAUSED_PARTITIONS``)."""

PAUSED_PARTITIONS = MetricDef(
    "cadenza_paused_partitions", _G, "Partitions the fetcher paused because the buffer is full."
)
"""Non-zero means the worker is saturated: input arrives faster than it runs it (or a pipeline
stopped, whose input partitions stay paused: see ``PIPELINE_STOPPED``)."""

PARTITION_BUFFERED_RECORDS = MetricDef(
    "cadenza_partition_buffered_records",
    _G,
    "Records of one assigned input partition waiting in the worker's buffer.",
    ("topic", "partition"),
)
"""The per-partition view of ``BUFFERED_RECORDS`` (summed over the sub-topologies reading the
partition): which partition fills the buffer, and which ones flow control pauses first."""

CONSUMER_LAG = MetricDef(
    "cadenza_consumer_lag",
    _G,
    "Records of an assigned partition not yet fetched: high watermark minus the fetch position.",
    ("topic", "partition"),
)
"""From librdkafka's statistics (each second), so up to a second old. Growing while the worker is
busy means input arrives faster than it runs it; growing while it is idle means it is paused."""

PIPELINE_STOPPED = MetricDef(
    "cadenza_pipeline_stopped",
    _G,
    "1 for a pipeline this worker stopped because a step failed (on_error='stop').",
    ("tenant", "pipeline"),
)
"""Alert on any 1: the pipeline's input is held at the failed record (uncommitted) until the worker
restarts; the log line names the step, the record's coordinates and the error."""

RECORDS_QUARANTINED = MetricDef(
    "cadenza_records_quarantined",
    _C,
    "Poison pills: records dead-lettered (disposition quarantined) because they were running at two "
    "deaths of their worker.",
    ("topic",),
)
"""``topic``: the input topic the record was read from (a repartition topic for steps after a
``key_by``). Each pipeline reading the record also counts it in ``cadenza_records_dead_lettered``
with ``reason="quarantined"``. Counted by the worker that quarantined it (see
:mod:`cadenza.worker.reliability.quarantine`)."""

# -- the connection to Kafka -----------------------------------------------------------------------

BROKER_REACHABLE = MetricDef(
    "cadenza_broker_reachable",
    _G,
    "1 while the worker's consumer has a connection to at least one broker, else 0.",
)
"""From librdkafka's statistics (each second) and its errors: 0 from an all-brokers-down error until
a broker is up again. ``/readyz`` answers 503 while it is 0; liveness is unaffected, since the
clients reconnect by themselves and a restart would not bring the broker back."""

KAFKA_CLIENT_ERRORS = MetricDef(
    "cadenza_kafka_client_errors",
    _C,
    "Errors librdkafka reported for the worker's clients (error_cb).",
    ("client", "error"),
)
"""``client``: ``consumer`` or ``producer``; ``error``: librdkafka's name, e.g. ``_TRANSPORT`` (a
connection failed), ``_ALL_BROKERS_DOWN``. A rising count with ``cadenza_broker_reachable`` at 1 is
a flaky network; the fatal ones also stop the worker."""

KAFKA_REQUESTS = MetricDef(
    "cadenza_kafka_requests",
    _C,
    "Requests the worker's clients sent to the brokers, by type (librdkafka's statistics).",
    ("client", "request"),
)
"""``client``: ``producer``, or the consumer of a fetch lane (``lane0``, ``lane1``...); ``request``:
the Kafka API (``Produce``, ``Fetch``, ``OffsetCommit``, ``Heartbeat``...). Updated each second. A
broker's cost follows its requests more than its records: records per ``Produce`` request (against
``cadenza_records_produced_total``) is how well the producer batches, and ``Fetch`` requests of a
quiet lane are the empty fetches its broker wait allows."""

WATERMARK_IDLE_TIMEOUTS = MetricDef(
    "cadenza_watermark_idle_timeouts",
    MetricKind.COUNTER,
    "Times a watermark input of a window or join step delivered nothing for watermark_idle_timeout "
    "and stopped holding the watermark back (its later records may then be late).",
    OPERATOR_LABELS,
)
"""Each firing is also logged, once per (step, partition, input); see docs/concepts/watermarks.md."""

WORKER_STALLS = MetricDef(
    "cadenza_worker_stalls",
    _C,
    "Rounds of the worker's loop that kept queued records waiting at least stall_threshold_ms, by "
    "the phase that took longest.",
    ("phase",),
)
"""``phase``: ``freeze``, ``copies``, ``fetch``, ``admit``, ``restore``, ``control``, ``run``,
``timers``, ``checkpoint`` or ``publish`` (see :mod:`cadenza.worker.reliability.loop_watch`). Every tenant's
records wait out a stall, so a rising count explains latency the scheduler cannot: ``run`` is a slow
user function or quantum (the log line names the slowest quantum), ``fetch`` a rebalance or commit
callback, ``freeze`` and ``restore`` large state settling. Each stall is also logged at WARNING
with every phase's time, at most every 10 s."""

WORKER_STALL_SECONDS = MetricDef(
    "cadenza_worker_stall_seconds",
    _C,
    "Busy seconds of the rounds counted in cadenza_worker_stalls_total, by the phase that took longest.",
    ("phase",),
)
"""Divided by ``cadenza_worker_stalls_total``: how long a stall of that phase lasts on average."""

# -- lessees (steps declared with parallel=) ---------------------------------------------------------

LESSEES = MetricDef("cadenza_lessees", _G, "Lessees a parallel step holds now.", _TPO)
"""Processes or threads running the step's calls beside the worker's loop; over time, the lease timeline."""

LESSEE_LEASES = MetricDef("cadenza_lessee_leases", _C, "Lessees a parallel step leased.", _TPO)
"""With ``cadenza_lessee_releases_total``: a pair rising together every few seconds is flapping."""

LESSEE_RELEASES = MetricDef("cadenza_lessee_releases", _C, "Lessees a parallel step gave back idle.", _TPO)
"""Releases of idle lessees only; deaths and timeouts are counted apart."""

LESSEE_SECONDS = MetricDef(
    "cadenza_lessee_seconds", _C, "Seconds of lessees leased by a parallel step, summed over lessees.", _TPO
)
"""The resource a step used beside the lessor: its rate is the mean number of lessees held."""

LESSEE_TIMEOUTS = MetricDef(
    "cadenza_lessee_timeouts", _C, "Calls of a parallel step dead-lettered past their timeout.", _TPO
)
"""Each one's record is dead-lettered with ``cadenza-error-type: StepTimeout``."""

LESSEE_DEATHS = MetricDef(
    "cadenza_lessee_deaths", _C, "Lessee processes of a step that died mid-batch.", _TPO
)
"""Their batches ran again elsewhere; a record whose call killed two is dead-lettered as ``LesseeDied``."""

LESSEE_ABANDONED = MetricDef(
    "cadenza_lessee_abandoned", _C, "Thread lessees left in a call past its timeout.", _TPO
)
"""A thread cannot be stopped: it ends when its call returns. Many of these hold memory and threads."""

LESSEE_HANDOFF_SECONDS = MetricDef(
    "cadenza_lessee_handoff_seconds", _C, "Seconds the worker's loop spent handing calls to lessees.", _TPO
)
"""Divided by ``cadenza_lessee_handed_calls_total``: the hand-off cost per call (pickling and the pipe)."""

LESSEE_HANDED_CALLS = MetricDef("cadenza_lessee_handed_calls", _C, "Calls handed to lessees.", _TPO)
"""Against ``cadenza_lessor_calls_total``: how much of the step ran beside the loop."""

LESSEE_MERGE_SECONDS = MetricDef(
    "cadenza_lessee_merge_seconds",
    _C,
    "Seconds the worker's loop spent merging a window aggregate's lifted partials into its windows.",
    _TPO,
)
"""Over the calls (handed plus the loop's own): the merge per record; closing the windows included."""

LESSOR_CALLS = MetricDef(
    "cadenza_lessor_calls", _C, "Calls of a parallel step the worker's loop ran itself.", _TPO
)
"""Before a ``parallel="auto"`` step's first lease, and while the loop has nothing else to run."""

WORKER_RESTARTS = MetricDef(
    "cadenza_worker_restarts",
    _C,
    "Times the worker process started its worker again after a Kafka client failure.",
)
"""Counted by :class:`~cadenza.worker.supervisor.WorkerSupervisor`: each restart is a new group member
that rebuilds its state from the changelogs and resumes from the committed offsets. Rising steadily
means a failure that keeps recurring; after too many in a short time the process exits."""

# -- feedback --------------------------------------------------------------------------------------

FEEDBACK_APPLIED = MetricDef(
    "cadenza_feedback_applied", _C, "Feedback statistics applied to the cost model.", _TPO
)
"""One per statistics record folded into an operator's cost estimate. Flat while the stats job runs
means the feedback loop is broken and estimates come from this worker's own measurements only."""

FEEDBACK_REJECTED = MetricDef(
    "cadenza_feedback_rejected", _C, "Feedback records skipped as unusable.", ("reason",)
)
"""``reason``: ``malformed`` (not a valid record of ``feedback.avsc``), ``invalid`` (decoded, but the
statistic or count cannot be used: negative, not finite, zero records) or ``outdated`` (a window
that is not newer than one already seen for the same operator)."""

FEEDBACK_SUPERSEDED = MetricDef(
    "cadenza_feedback_superseded",
    _C,
    "Feedback records replaced by newer statistics before the executor applied them.",
)
"""Not an error: only the newest statistics per operator are kept for the executor, so a backlog of
feedback costs one update per operator instead of one per record."""

# -- spans -----------------------------------------------------------------------------------------

SPANS_PRODUCED = MetricDef("cadenza_spans_produced", _C, "Spans acknowledged by the metrics topic.")
"""Sampled spans that reached Kafka; with the sampling ratio it tells how many executions they stand
for."""

SPANS_DROPPED = MetricDef(
    "cadenza_spans_dropped", _C, "Sampled spans that were dropped instead of produced.", ("reason",)
)
"""``reason``: ``buffer_full`` (the emitter's bounded buffer was full: the sender or the metrics topic
could not keep up, and the worker is never made to wait for it), ``producer_full`` (the producer's
own queue refused the record), ``encode`` (a span field could not be encoded) or ``delivery`` (Kafka
did not acknowledge it). Sampled-out spans are not drops."""

# -- rates for scaling (DS2) -----------------------------------------------------------------------

SUBTOPOLOGY_LABELS: tuple[str, str, str] = ("tenant", "pipeline", "sub_topology")
"""A sub-topology is named by its input topic, unique within a pipeline."""

TRUE_PROCESSING_RATE = MetricDef(
    "cadenza_true_processing_rate",
    _G,
    "Records a sub-topology processed per second of useful (busy) time, over the last rate window.",
    SUBTOPOLOGY_LABELS,
)
"""DS2's true processing rate of this worker's instance of the sub-topology: what it could absorb if
it never waited. 0 when nothing ran in the window."""

TRUE_OUTPUT_RATE = MetricDef(
    "cadenza_true_output_rate",
    _G,
    "Records a sub-topology produced per second of useful (busy) time, over the last rate window.",
    SUBTOPOLOGY_LABELS,
)
"""Produced counts sink and repartition records of the sub-topology's steps (a join's output counts in
both of its input sub-topologies)."""

OBSERVED_PROCESSING_RATE = MetricDef(
    "cadenza_observed_processing_rate",
    _G,
    "Records a sub-topology processed per second of wall time, over the last rate window.",
    SUBTOPOLOGY_LABELS,
)
"""Against the true rate it gives how busy the instance was."""

OBSERVED_OUTPUT_RATE = MetricDef(
    "cadenza_observed_output_rate",
    _G,
    "Records a sub-topology produced per second of wall time, over the last rate window.",
    SUBTOPOLOGY_LABELS,
)
"""The sub-topology's output rate as its downstream sees it."""

POOL_DESIRED_WORKERS = MetricDef(
    "cadenza_pool_desired_workers", _G, "Worker processes the pool controller wants (DS2, bounded)."
)
"""Exported by ``cadenza pool``; on Kubernetes an HPA (or KEDA) scales the worker Deployment to it."""

POOL_WORKERS = MetricDef("cadenza_pool_workers", _G, "Worker processes the pool is running.")
"""Differs from the desired count while a change is being applied."""

ALL_METRICS: tuple[MetricDef, ...] = (
    RECORDS_CONSUMED,
    RECORDS_PROCESSED,
    RECORDS_PRODUCED,
    RECORDS_DEAD_LETTERED,
    RECORDS_LATE,
    CONTEXT_HEADERS_MISSING,
    CONTEXT_HEADERS_GARBLED,
    CONTEXT_HEADERS_REJECTED,
    DEADLINES_MET,
    DEADLINES_MISSED,
    QUEUE_WAIT,
    RUN_TIME,
    E2E_LATENCY,
    FETCH_LATENCY,
    REPARTITION_HOP,
    PRODUCE_ACK,
    WINDOW_CLOSE_WAIT,
    LATENCY_TARGET,
    PLANNED_HOP,
    BUFFERED_RECORDS,
    PARTITION_BUFFERED_RECORDS,
    CONSUMER_LAG,
    PAUSED_PARTITIONS,
    PIPELINE_STOPPED,
    RECORDS_QUARANTINED,
    WATERMARK_IDLE_TIMEOUTS,
    BROKER_REACHABLE,
    KAFKA_CLIENT_ERRORS,
    KAFKA_REQUESTS,
    WORKER_STALLS,
    WORKER_STALL_SECONDS,
    LESSEES,
    LESSEE_LEASES,
    LESSEE_RELEASES,
    LESSEE_SECONDS,
    LESSEE_TIMEOUTS,
    LESSEE_DEATHS,
    LESSEE_ABANDONED,
    LESSEE_HANDOFF_SECONDS,
    LESSEE_HANDED_CALLS,
    LESSEE_MERGE_SECONDS,
    LESSOR_CALLS,
    WORKER_RESTARTS,
    FEEDBACK_APPLIED,
    FEEDBACK_REJECTED,
    FEEDBACK_SUPERSEDED,
    SPANS_PRODUCED,
    SPANS_DROPPED,
    TRUE_PROCESSING_RATE,
    TRUE_OUTPUT_RATE,
    OBSERVED_PROCESSING_RATE,
    OBSERVED_OUTPUT_RATE,
    POOL_DESIRED_WORKERS,
    POOL_WORKERS,
)
"""Every metric above, in the order the docs list them."""
