"""S1's knobs: the configuration of a run, its two sizings, the demo's and the quick presets, the
order its phases run in, and what the calibration found (:class:`Capacity`), whose BA rate every
phase's input is planned at. See :mod:`cadenza.demo.s1` for the scenario.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

POLICIES = ("fifo", "edf", "sjf", "cameo", "fair")
TENANTS = ("LS", "BA")
#: Partitions of every S1 topic unless a sizing says otherwise.
PARTITIONS = 4
#: BA ids of warm-up jobs start here, far above any measured phase's (which start at 0).
WARMUP_FIRST_ID = 1_000_000_000

Progress = Callable[[str], None]


@dataclass(frozen=True)
class S1Config:
    duration: float = 40.0
    warmup: float = 8.0
    drain: float = 20.0
    repetitions: int = 3
    load: float = 0.75
    ls_rate: float = 300.0
    users: int = 40
    health_share: float = 0.05
    ba_cost_ms: float = 1.0
    #: What a BA job's cost is counted in: ``iterations`` of ``burn``, calibrated once to ``ba_cost_ms``
    #: (the cost then moves with the host's speed, as any real code's does), or ``cpu``: ``burn_cpu``
    #: for ``ba_cost_ms`` of the worker thread's CPU time, the same cost whatever the host's speed.
    ba_cost_kind: str = "iterations"
    #: Partitions of each topic (inputs, outputs, the worker's repartition topic).
    partitions: int = PARTITIONS
    #: How long the LS tenant's producer lingers: a few ms batch the clicks of a moment into one
    #: request, which the embedded broker pays for more than for records.
    ls_linger_ms: float = 2.0
    #: How long the BA tenant's producer lingers to batch its jobs (its target is seconds): fewer
    #: produce requests and record batches for the broker to hold and serve.
    ba_linger_ms: float = 2.0
    #: Measure LS alone on a backlog first: only a check that LS leaves room for BA, skipped where
    #: LS is plainly a small share (the demo's 100 clicks/s against about 17,000/s).
    calibrate_ls: bool = True
    burst_alpha: float = 1.5
    burst_mean_s: float = 2.0
    burst_max_s: float = 6.0
    burst_peak: float = 4.0
    ls_target: float = 0.3
    ba_target: float = 5.0
    seed: int = 7
    #: Scheduling policies of cadenza workers, or names of peer systems passed to ``run_benchmark``.
    systems: tuple[str, ...] = POLICIES
    #: Where cadenza workers send sampled spans (for the stats job), or None.
    spans_topic: str | None = None
    span_sample_ratio: float = 0.05
    #: The cadenza workers' --metrics-port (None: a free one per run); `cadenza demo`'s dashboard scrapes it.
    metrics_port: int | None = None
    #: Without an external broker: a fresh embedded broker for the calibration and for every run. The
    #: embedded broker keeps every record in memory and its CPU per request grows with what it holds,
    #: so on one broker for all runs the later runs (and not the calibration) share the cores with a
    #: busier broker.
    broker_per_run: bool = True
    #: The name of the preset (``SIZINGS``) the record sizes came from, kept in the JSON so that a
    #: table can say which sizing it used.
    sizing: str = "light"
    #: ``rotate``: repetition r starts at the r-th system (S1's order); ``mirrored``: odd repetitions
    #: run the systems in reverse (fifo, cameo, cameo, fifo), so no policy always meets the machine
    #: and the broker later than the other.
    order: str = "rotate"
    #: Seconds of the BA calibration's output skipped (its first batches come out faster than it then
    #: keeps up), then measured.
    calibration_skip: float = 8.0
    calibration_measure: float = 12.0

    def __post_init__(self) -> None:
        if self.order not in ORDERS:
            raise ValueError(f"unknown S1 order {self.order!r}; choose from {', '.join(ORDERS)}")
        if self.ba_cost_kind not in COST_KINDS:
            kinds = ", ".join(COST_KINDS)
            raise ValueError(f"unknown BA cost kind {self.ba_cost_kind!r}; choose from {kinds}")


#: The same CPU load on the worker from records of two sizes. ``light``: BA jobs of 1 ms at about
#: 650/s beside 300 LS clicks/s (S1 as measured until 2026-12-05); the embedded broker then takes
#: 0.4-0.6 of a core of the two, and its cost moves the capacity left for the worker. ``heavy``: BA
#: jobs of 5 ms of CPU time (``ba_cost_kind="cpu"``) at a fifth of that rate, LS at 100/s over 20
#: users (still about 5 clicks per user and window), 2 partitions a topic, the tenants' producers
#: lingering 25 ms (LS) and 50 ms (BA): a quarter of the records in fewer requests, which the
#: embedded broker pays for more than for records. Its CPU under cameo went 0.19-0.20 of a core with
#: 10/20 ms lingers, 0.13-0.14 with these (2026-12-06); cameo's LS p99 stayed 130-170 ms.
SIZINGS: dict[str, dict[str, Any]] = {
    "light": {},
    "heavy": {
        "ba_cost_ms": 5.0,
        "ba_cost_kind": "cpu",
        "ls_rate": 100.0,
        "users": 20,
        "partitions": 2,
        "ls_linger_ms": 25.0,
        "ba_linger_ms": 50.0,
    },
}
ORDERS = ("rotate", "mirrored")
COST_KINDS = ("iterations", "cpu")


def sized(sizing: str, **overrides: Any) -> S1Config:
    """An ``S1Config`` of the preset ``sizing`` (``SIZINGS``), with ``overrides`` on top."""
    if sizing not in SIZINGS:
        raise ValueError(f"unknown S1 sizing {sizing!r}; choose from {', '.join(SIZINGS)}")
    return S1Config(**{**SIZINGS[sizing], **overrides, "sizing": sizing})


def phase_order(config: S1Config) -> list[tuple[str, int]]:
    """The (system, repetition) of every phase, in the order they run (see ``S1Config.order``)."""
    systems = list(config.systems)
    phases: list[tuple[str, int]] = []
    for repetition in range(config.repetitions):
        if config.order == "mirrored":
            order = systems if repetition % 2 == 0 else systems[::-1]
        else:
            shift = repetition % len(systems)
            order = systems[shift:] + systems[:shift]
        phases.extend((system, repetition) for system in order)
    return phases


def quick_config(sizing: str = "light", **overrides: Any) -> S1Config:
    """One repetition of 20 s: a few minutes for all six systems on 2 cores."""
    return sized(sizing, **{"duration": 20.0, "warmup": 6.0, "drain": 15.0, "repetitions": 1, **overrides})


def demo_config(**overrides: Any) -> S1Config:
    """``cadenza demo``: heavy records, fifo and cameo in mirrored order (fifo, cameo, cameo, fifo),
    each phase 12 s of bursts: about two minutes with the calibration on 2 cores."""
    return sized(
        "heavy",
        **{
            "systems": ("fifo", "cameo"),
            "order": "mirrored",
            "repetitions": 2,
            "duration": 12.0,
            "warmup": 4.0,
            "drain": 10.0,
            "calibration_skip": 4.0,
            "calibration_measure": 8.0,
            "calibrate_ls": False,
            "broker_per_run": False,
            **overrides,
        },
    )


@dataclass
class Capacity:
    #: LS alone, on a backlog (None: not measured, ``S1Config.calibrate_ls``).
    ls_rps: float | None
    #: BA fed live beyond what it can run, while LS arrives live at ``ls_rate`` (this process sends and
    #: reads, as in the measured runs): what the worker has left for BA in the benchmark's conditions.
    ba_rps: float
    iterations: int
    #: LS records/s the calibration's worker ran while BA's capacity was measured: about ``ls_rate``
    #: when LS was served in full, as it must be for ``ba_rps`` to mean what is left beside it.
    ls_beside_ba_rps: float = 0.0
    #: BA's mean seconds per job while ``ba_rps`` was measured (``mean_run_seconds``): a phase whose
    #: jobs took longer had less capacity, in that proportion.
    ba_run_s: float | None = None
    #: The host's speed at calibration (``machine_speed``), the reference of each phase's speed check.
    speed_iterations: int = 1

    def ba_rate(self, config: S1Config) -> float:
        """The BA mean rate at ``config.load`` of the BA capacity left beside live LS traffic.

        An earlier version measured BA alone on an idle machine and subtracted LS's share; with the
        load generator and reader on the same 2 cores the worker then sustained less than planned, and
        a full run came out overloaded under every policy.
        """
        if self.ls_rps is not None and config.ls_rate / self.ls_rps > 0.5:
            raise SystemExit(
                f"LS alone at {config.ls_rate:g}/s uses {config.ls_rate / self.ls_rps:.0%} of the worker; "
                "lower --ls-rate"
            )
        return config.load * self.ba_rps
