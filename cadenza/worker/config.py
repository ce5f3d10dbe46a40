"""Every setting of a worker, declared once: default, range, unit and meaning.

:class:`WorkerConfig` is a pydantic-settings model read from ``CADENZA_*`` variables. Its process settings
(metrics endpoint, discovery, restarts, stop timeout) are :class:`ProcessConfig`. Both are read the
same way by ``cadenza worker`` and by ``Worker(pipelines, settings, config, process=...)``: the
command's options are built from the fields (name, environment variable, default, bounds and help),
the worker reads the models themselves, and the settings table of the docs site
(``docs/reference/settings.md``) is rendered from them by :func:`settings_table` at build time.
Settings in milliseconds keep the ``_ms`` suffix their options and variables have always had.
"""

from __future__ import annotations

import json
from itertools import pairwise
from pathlib import Path
from typing import Any, TypeVar

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, SettingsConfigDict

from cadenza.analysis.kafka_trace import ACTIVITIES_TOPIC
from cadenza.errors import ConfigError
from cadenza.settings import describe_validation_error
from cadenza.worker.announcer import DEFAULT_DISCOVERY_TOPIC

__all__ = [
    "ENV_PREFIX",
    "ProcessConfig",
    "WorkerConfig",
    "bounds",
    "lane_bounds",
    "settings_in_effect",
    "settings_table",
    "unit",
]

ENV_PREFIX = "CADENZA_"
_Model = TypeVar("_Model", bound=BaseSettings)


def _load(model: type[_Model], values: dict[str, Any]) -> _Model:
    """``model`` from the environment and ``values``; a ConfigError naming each bad setting and its
    variable otherwise."""
    try:
        return model(**values)
    except ValidationError as exc:
        raise ConfigError(describe_validation_error(exc, env_prefix=ENV_PREFIX)) from None


#: Topic names that turn a topic setting off.
OFF = ("", "off")


def _field(
    default: Any,
    doc: str,
    unit: str = "",
    *,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
) -> Any:
    return Field(
        default=default, description=doc, json_schema_extra={"unit": unit}, ge=ge, gt=gt, le=le, lt=lt
    )


class WorkerConfig(BaseSettings):
    """The settings of one worker process (``cadenza worker`` or ``Worker(config=...)``)."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", validate_default=True)

    group: str | None = _field(
        None,
        "Consumer group of the deployment (default: cadenza-<its pipelines' names>). Every worker of a "
        "group must run the same pipelines.",
    )
    policy: str = _field("cameo", "Scheduling policy: fifo, edf, cameo, sjf, fair, or package.module:Class.")
    partitions: int = _field(4, "Partitions for topics the worker has to create.", ge=1)
    batch_size: int = _field(1000, "Most records fetched per poll.", "records", ge=1)
    max_buffered: int = _field(
        10_000, "Most records held in the scheduler; partitions are paused beyond it.", "records", ge=1
    )
    quantum_records: int = _field(
        16, "Records an operator-partition runs before priorities are re-checked.", "records", ge=1
    )
    quantum_ms: float = _field(
        2.0, "Time an operator-partition may run before priorities are re-checked.", "ms", gt=0.0
    )
    run_slice: float = _field(
        0.01, "Longest the scheduler runs records before it polls Kafka again.", "s", gt=0.0, lt=60.0
    )
    poll_timeout: float = _field(0.1, "Longest a poll waits for records when nothing is queued.", "s", gt=0.0)
    cores: int | None = _field(
        None,
        "Cores the worker may use: process lessees of parallel steps are at most cores - 1 "
        "(default: the CPUs the process may run on, bounded by a cgroup CPU quota).",
        ge=1,
    )
    max_thread_lessees: int = _field(16, "Most thread lessees leased at once (blocking I/O steps).", ge=1)
    warm_lessees: int = _field(
        1, "Process lessees started ahead, so a lease never waits for an interpreter to start.", ge=0
    )
    lessee_idle_release: float = _field(
        2.0, "Time a lessee of a parallel='auto' step idles before it is released.", "s", gt=0.0
    )
    commit_interval: float = _field(
        0.2, "Time between offset commits of finished records.", "s", gt=0.0, lt=3600.0
    )
    restore_timeout: float = _field(
        60.0,
        "Longest the worker spends reading a newly assigned partition's window and join state back "
        "before it fails (the time between restore slices, running records, does not count).",
        "s",
        gt=0.0,
    )
    restore_slice: float = _field(
        0.01,
        "Longest the worker reads changelogs at a time between runs of records while newly assigned "
        "partitions' state is restored (each such partition waits, paused, for its own state only); "
        "0: restore all of an assignment inside the assignment callback, every partition waiting.",
        "s",
        ge=0.0,
        lt=60.0,
    )
    watermark_idle_timeout: float = _field(
        30.0,
        "Time an input partition of a window or join may deliver nothing before it stops holding the "
        "watermark back (counted in cadenza_watermark_idle_timeouts_total); 0: it holds it back for "
        "ever. See docs/concepts/watermarks.md.",
        "s",
        ge=0.0,
    )
    progress_interval_ms: float = _field(
        50.0,
        "Most time between the progress records a key_by writes to its repartition topic, which let "
        "the windows downstream advance when a key sends them nothing (before one tumbling or hopping "
        "window: only progress that passes a window close, plus a keep-alive every quarter of the idle "
        "timeout).",
        "ms",
        ge=1.0,
        le=59_999.0,
    )
    state_store: str = _field(
        "memory",
        "Where window and join state lives: memory, rocksdb (under --state-dir), or the "
        "package.module:factory path of a store factory.",
    )
    state_dir: Path | None = _field(None, "Directory of the rocksdb state store.")

    @field_validator("state_store")
    @classmethod
    def _store_spec(cls, value: str) -> str:
        """The form is checked with the other settings; the factory is imported when the worker starts
        (:func:`cadenza.state.store_factory`), which names a module or attribute it cannot find."""
        spec = value.strip()
        module, colon, attribute = spec.partition(":")
        if spec in ("memory", "rocksdb") or (colon and module.strip() and attribute.strip()):
            return spec
        raise ValueError(
            f"unknown state store {spec!r}; use memory, rocksdb, or 'package.module:factory' for a "
            "store factory of your own"
        )

    hop_quantile: float = _field(
        0.99,
        "Quantile of each repartition hop's latency (last 10 s, as cadenza_repartition_hop_seconds "
        "measures it) that start deadlines upstream of the hop count; 0: hops are left out of them.",
        ge=0.0,
        lt=1.0,
    )
    spans_topic: str | None = _field(None, "Send sampled per-operator spans to this topic.")
    span_sample_ratio: float = _field(0.01, "Share of traces sent to the spans topic.", gt=0.0, le=1.0)
    feedback_topic: str | None = _field(
        None, "Read the stats job's cost statistics from this topic; publish the worker's true rates to it."
    )
    activities_topic: str = _field(
        ACTIVITIES_TOPIC,
        "Send the worker's activity trace to this topic (for cadenza analyze); 'off' sends none.",
    )
    max_poll_interval: float = _field(
        300.0,
        "Time one user call may run before the group declares the worker's partitions lost "
        "(max.poll.interval.ms); at least the session timeout.",
        "s",
        ge=1.0,
    )
    hang_timeout: float | None = _field(
        None,
        "Time after which a running user call is pinned as a possible poison pill and logged at ERROR "
        "(default: 80% of --max-poll-interval). A record pinned at two deaths of the worker (a crash, "
        "an OOM kill, a hang past --max-poll-interval) is dead-lettered as quarantined.",
        "s",
        gt=0.0,
    )
    crash_dir: Path | None = _field(
        None,
        "Directory of the crash slots, which name the record a worker was running when it died, so "
        "that its successor on the host pins that record at once and a poison pill is quarantined at "
        "its second death (default: <state-dir>/crash, else cadenza/crash under the temp directory). "
        "Put it on a volume that survives the worker's restarts (an emptyDir in Kubernetes); see "
        "docs/operations/reliability.md.",
    )
    consumer_overrides: dict[str, str | int | float | bool] = _field(
        {},
        "librdkafka settings for the worker's consumers, as a JSON object (for example "
        '{"fetch.max.bytes": 1048576}); they override what the worker sets itself.',
    )

    @field_validator("consumer_overrides", mode="before")
    @classmethod
    def _overrides_json(cls, value: Any) -> Any:
        """Given as text (an option, a variable): a JSON object."""
        if isinstance(value, str):
            try:
                value = json.loads(value) if value.strip() else {}
            except json.JSONDecodeError as exc:
                raise ValueError(f"not a JSON object: {exc}") from None
            if not isinstance(value, dict):
                raise ValueError("must be a JSON object of librdkafka settings")
        return value

    lanes: str = _field(
        "auto",
        "Fetch lanes, one consumer each, so that records of latency-sensitive pipelines never queue "
        "behind bulk ones fetched earlier: auto (a lane per group of latency targets within 4x of "
        "each other; one lane if they all are), off (one consumer for every topic), or ascending "
        "bounds in ms (500,10000: topics whose tightest target is below 500 ms, below 10 s, the "
        "rest). Lanes behind the most urgent one wait at the broker for 5% of their target (at "
        "least the fetch wait, at most 500 ms) or 256 KB, and write through a producer of their own "
        "that lingers 2% of their target (at least the linger, at most 100 ms); see "
        "benchmarks/results/2026-11-29/NOTES.md (Fetch lanes on S1 again; Produce lanes).",
    )

    fetch_wait_ms: int = _field(
        20,
        "Longest time a fetch waits at the broker for records (librdkafka's fetch.wait.max.ms; the "
        "most urgent lane's, and the least any lane waits): short sees a quiet partition's next "
        "record sooner on brokers that hold a fetch for the whole wait (the embedded one); long "
        "sends fewer empty fetches, which the embedded broker pays for more the more records it "
        "holds (see benchmarks/results/2026-11-26/NOTES.md, S4).",
        "ms",
        ge=1,
        le=10_000,
    )

    @field_validator("lanes")
    @classmethod
    def _lanes_spec(cls, value: str) -> str:
        lane_bounds(value)  # raises ValueError naming what is wrong
        return value.strip().lower()

    replace_plan: bool = _field(
        False,
        "Record this worker's pipelines as the group's plan even while the group has live members (an "
        "upgrade whose old workers' sessions have not expired yet). Without it a worker whose pipelines "
        "differ from its group's is refused (exit 2) until the old workers are gone.",
    )
    ownership: str = _field(
        "group",
        "Where the worker's input partitions come from: group (the consumer group's rebalances) or "
        "plan (the ownership plan in the cadenza-ownership topic, written by a pool controller: "
        "partitions move warm and one at a time, see docs/concepts/scaling.md; no joins yet).",
    )

    @field_validator("ownership")
    @classmethod
    def _ownership_mode(cls, value: str) -> str:
        mode = value.strip().lower()
        if mode not in ("group", "plan"):
            raise ValueError(f"must be 'group' or 'plan', got {value!r}")
        return mode

    worker_id: str | None = _field(
        None,
        "This worker's name in the ownership plan, its spans and its rates (default: host-pid). A plan "
        "names owners by it, so under ownership plan it must be stable across restarts.",
    )
    gc_young_threshold: int = _field(
        10_000,
        "Allocations between the cyclic garbage collector's young-generation passes while the worker "
        "runs (Python's default: 700), with what is alive at its start, what survives a full "
        "collection and restored state frozen out of the collector's walks, so that buffered records "
        "and large state are not walked again and again: up to ~5 us per record saved with many "
        "buffered, and full passes of a second or more with a million keys of state, for reference "
        "cycles freed later (more memory held). 0 leaves the collector alone.",
        "objects",
        ge=0,
    )

    stall_threshold_ms: float = _field(
        100.0,
        "A round of the worker's loop busy this long (a fetch that waited for records with nothing "
        "queued does not count) kept every tenant's records waiting: it is counted in "
        "cadenza_worker_stalls_total by the phase that took longest, and logged at WARNING with each "
        "phase's time (at most every 10 s).",
        "ms",
        gt=0.0,
        lt=3_600_000.0,
    )

    @model_validator(mode="after")
    def _hang_below_poll(self) -> WorkerConfig:
        if self.hang_timeout is not None and not self.hang_timeout < self.max_poll_interval:
            raise ValueError(
                f"hang_timeout ({self.hang_timeout:g} s) must be below max_poll_interval "
                f"({self.max_poll_interval:g} s)"
            )
        return self

    @property
    def hang_seconds(self) -> float:
        """The hang timeout in effect: the one given, else 80% of ``max_poll_interval``."""
        return self.hang_timeout if self.hang_timeout is not None else 0.8 * self.max_poll_interval

    @property
    def activities(self) -> str | None:
        """The activities topic, or ``None`` when the trace is off."""
        return None if self.activities_topic in OFF else self.activities_topic

    @classmethod
    def load(cls, **values: Any) -> WorkerConfig:
        """The environment's ``CADENZA_*`` settings overridden by ``values`` (see :func:`_load`)."""
        return _load(cls, values)


class ProcessConfig(BaseSettings):
    """The settings of the process a worker runs in rather than of its engine: its metrics endpoint,
    its announcement on the discovery topic, its restarts and how long a stop may take. Read by
    :meth:`Worker.run <cadenza.worker.Worker.run>` and :meth:`Worker.serve <cadenza.worker.Worker.serve>`,
    which is what ``cadenza worker`` calls."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", validate_default=True)

    metrics_port: int | None = _field(
        None, "Serve /metrics (Prometheus), /healthz and /readyz on this port.", ge=0, le=65535
    )
    metrics_host: str = _field("127.0.0.1", "Address the metrics port binds.")
    metrics_advertised_host: str | None = _field(
        None,
        "Host others reach the metrics port at, as announced on the discovery topic (default: "
        "--metrics-host, or the hostname when that is a wildcard such as 0.0.0.0).",
    )
    discovery_topic: str = _field(
        DEFAULT_DISCOVERY_TOPIC,
        "With --metrics-port: announce the metrics URL on this compacted topic every few seconds (for "
        "cadenza dashboard --discovery-topic); 'off' announces nothing.",
    )
    max_restarts: int = _field(
        5,
        "Restarts of the worker after a Kafka client failure (a broker that came back without its "
        "producer state, say) within 10 minutes before the process exits non-zero; 0: exit at once.",
        ge=0,
    )
    stop_timeout: float = _field(
        15.0,
        "Time a SIGTERM or Ctrl-C waits for the step in flight; past it (a user function that hangs) "
        "the worker leaves its group without committing that record and exits 3.",
        "s",
        ge=0.1,
    )

    @classmethod
    def load(cls, **values: Any) -> ProcessConfig:
        """The environment's ``CADENZA_*`` settings overridden by ``values`` (see :func:`_load`)."""
        return _load(cls, values)

    @property
    def announces(self) -> bool:
        """Whether the worker announces its metrics URL (it serves them, and discovery is on)."""
        return self.metrics_port is not None and self.discovery_topic not in OFF


def lane_bounds(spec: str) -> tuple[float, ...] | None:
    """The ``lanes`` setting checked: ``None`` for ``auto``, ``()`` for ``off``, else the bounds in
    seconds. Raises :class:`ValueError` naming what is wrong."""
    text = spec.strip().lower()
    if text == "auto":
        return None
    if text in ("off", "1", ""):
        return ()
    try:
        bounds = tuple(float(part) / 1000.0 for part in text.split(","))
    except ValueError:
        raise ValueError(
            f"lanes must be auto, off, or ascending latency bounds in ms such as 1000 or 500,10000; "
            f"got {spec!r}"
        ) from None
    if any(b <= 0 for b in bounds) or any(a >= b for a, b in pairwise(bounds)):
        raise ValueError(f"lanes bounds must be positive and ascending (in ms), got {spec!r}")
    return bounds


def settings_in_effect(config: WorkerConfig, process: ProcessConfig, **derived: Any) -> dict[str, Any]:
    """Every setting of both models as JSON values, with what the worker derived for those left to
    a default (``derived``: its group, its id, its policy's name...)."""
    values: dict[str, Any] = {**config.model_dump(mode="json"), **process.model_dump(mode="json")}
    values["hang_timeout"] = config.hang_seconds
    values.update(derived)
    return values


def unit(field: FieldInfo) -> str:
    extra = field.json_schema_extra
    return str(extra.get("unit", "")) if isinstance(extra, dict) else ""


def bounds(field: FieldInfo) -> dict[str, float]:
    """The field's numeric bounds by constraint name (``ge``, ``gt``, ``le``, ``lt``)."""
    found: dict[str, float] = {}
    for constraint in field.metadata:
        for name in ("ge", "gt", "le", "lt"):
            value = getattr(constraint, name, None)
            if value is not None:
                found[name] = value
    return found


def _range_text(field: FieldInfo) -> str:
    symbols = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<"}
    return ", ".join(f"{symbols[name]} {value:g}" for name, value in bounds(field).items())


def _default_text(field: FieldInfo) -> str:
    default = field.default
    if default is None:
        return ""
    return f"`{default:g}`" if isinstance(default, float) else f"`{default}`"


def settings_table(model: type[BaseSettings] | None = None) -> str:
    """The docs' table of worker settings, one row per field of ``model`` (default: both models)."""
    rows = [
        "| variable | option | default | unit | range | meaning |",
        "|---|---|---|---|---|---|",
    ]
    models = (WorkerConfig, ProcessConfig) if model is None else (model,)
    for name, field in ((n, f) for m in models for n, f in m.model_fields.items()):
        rows.append(
            f"| `{ENV_PREFIX}{name.upper()}` | `--{name.replace('_', '-')}` | {_default_text(field)} | "
            f"{unit(field)} | {_range_text(field)} | {field.description} |"
        )
    return "\n".join(rows)
