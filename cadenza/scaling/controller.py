"""The DS2 pool controller: when to act on DS2's decision, and when not to.

DS2's decision is only as good as the window it was measured on. Right after a reconfiguration the
rates describe a rebalancing pool (restores, cold caches, lag being drained), so windows in the
warm-up are ignored. A single noisy window must not move the pool, so a change is applied only once
it has held for ``activation_windows`` consecutive evaluations; giving capacity back is cheaper to
postpone than to regret (a scale-down that was wrong costs lag and a second rebalance), so it must
hold for ``scale_down_windows``. Evaluations are at most one per ``policy_interval_s``.

Pure and driven by an injected clock: every branch can be replayed exactly under a VirtualClock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from cadenza.scaling.ds2 import InstanceRates, decide, raw_parallelism
from cadenza.scaling.workers import UnderPartitioned, workers_for
from cadenza.scheduling.clock import Clock

__all__ = ["Action", "ControllerSettings", "PacedController", "PoolController", "PoolDecision", "RateWindow"]

Action = Literal["wait", "warmup", "hold", "pending", "scale_up", "scale_down"]


class ControllerSettings(BaseSettings):
    """Pool controller knobs, also read from ``CADENZA_POOL_*`` environment variables."""

    model_config = SettingsConfigDict(
        env_prefix="CADENZA_POOL_", extra="ignore", validate_default=True, frozen=True
    )

    min_workers: int = Field(default=1, ge=1, description="Never run fewer workers.")
    max_workers: int = Field(default=4, ge=1, description="Never run more workers.")
    policy_interval_s: float = Field(
        default=10.0, gt=0, description="At most one evaluation per interval (seconds)."
    )
    warmup_s: float = Field(
        default=30.0, ge=0, description="Windows ending this soon after a reconfiguration are ignored."
    )
    activation_windows: int = Field(
        default=2, ge=1, description="A change must hold this many consecutive evaluations."
    )
    scale_down_windows: int = Field(
        default=4, ge=1, description="A scale-down must hold this many (>= activation_windows)."
    )
    utilisation_target: float = Field(
        default=0.8, gt=0, le=1, description="Share of a worker's core the pool plans to use."
    )
    over_provisioning: float = Field(
        default=0.0, ge=0, description="DS2's over-provisioning factor (e.g. 0.2 to drain lag)."
    )

    @model_validator(mode="after")
    def _consistent(self) -> ControllerSettings:
        if self.min_workers > self.max_workers:
            raise ValueError(
                f"CADENZA_POOL_MIN_WORKERS ({self.min_workers}) exceeds "
                f"CADENZA_POOL_MAX_WORKERS ({self.max_workers})"
            )
        if self.scale_down_windows < self.activation_windows:
            raise ValueError(
                f"CADENZA_POOL_SCALE_DOWN_WINDOWS ({self.scale_down_windows}) must be at least "
                f"CADENZA_POOL_ACTIVATION_WINDOWS ({self.activation_windows}): scale-down is the "
                "stricter of the two"
            )
        return self


@dataclass(frozen=True)
class RateWindow:
    """One measurement window of the running pool: DS2's inputs plus each sub-topology's partitions.

    ``operators``/``edges``/``rates``/``source_rates`` are exactly :func:`cadenza.scaling.decide`'s
    arguments, with sub-topologies (and input topics as sources) as operators; ``partitions`` holds
    the partition count of every non-source sub-topology.
    """

    operators: Mapping[str, int]
    edges: Sequence[tuple[str, str]]
    rates: Mapping[str, Sequence[InstanceRates]]
    partitions: Mapping[str, int]
    source_rates: Mapping[str, float] | None = None


@dataclass(frozen=True)
class PoolDecision:
    """What the controller did with one window, with the inputs it decided from (for the log)."""

    at: float
    action: Action
    workers: int
    desired: int
    proposed: int | None
    reason: str
    parallelism: dict[str, int] = field(default_factory=dict)
    under_partitioned: tuple[UnderPartitioned, ...] = ()

    def as_dict(self) -> dict[str, object]:
        return {
            "at": self.at,
            "action": self.action,
            "workers": self.workers,
            "desired": self.desired,
            "proposed": self.proposed,
            "reason": self.reason,
            "parallelism": dict(self.parallelism),
            "under_partitioned": [u.fix for u in self.under_partitioned],
        }


class PacedController:
    """What every pool controller shares, whatever its decision rule: the worker count it believes
    is running, and the pacing of its decisions (no decision within ``warmup_s`` of a
    reconfiguration, none more often than every ``policy_interval_s``), so that a benchmark of two
    controllers compares only their rules."""

    def __init__(self, settings: ControllerSettings, clock: Clock, workers: int) -> None:
        self._settings = settings
        self._clock = clock
        self._workers = min(max(workers, settings.min_workers), settings.max_workers)
        self._reconfigured_at = clock.now()
        self._last_evaluation: float | None = None

    @property
    def workers(self) -> int:
        """The worker count the controller believes is running (its last desired count)."""
        return self._workers

    def reconfigured(self, workers: int) -> None:
        """The pool changed outside the controller (a crash, a manual resize): warm up again."""
        self._workers = workers
        self._reconfigured_at = self._clock.now()

    def _paced(self, now: float) -> tuple[Action, str] | None:
        """Why no decision is due at ``now`` (action and reason), or ``None`` when one is (and the
        evaluation it starts is then counted)."""
        s = self._settings
        if now - self._reconfigured_at < s.warmup_s:
            return "warmup", f"within {s.warmup_s}s of the last reconfiguration"
        if self._last_evaluation is not None and now - self._last_evaluation < s.policy_interval_s:
            return "wait", f"less than {s.policy_interval_s}s since the last evaluation"
        self._last_evaluation = now
        return None


class PoolController(PacedController):
    """Turns rate windows into a desired worker count; call :meth:`evaluate` once per window."""

    def __init__(self, settings: ControllerSettings, clock: Clock, workers: int) -> None:
        super().__init__(settings, clock, workers)
        self._streak: list[int] = []

    def reconfigured(self, workers: int) -> None:
        super().reconfigured(workers)
        self._streak.clear()

    def evaluate(self, window: RateWindow) -> PoolDecision:
        now = self._clock.now()
        s = self._settings
        current = self._workers

        def decision(
            action: Action,
            reason: str,
            proposed: int | None = None,
            parallelism: dict[str, int] | None = None,
            under_partitioned: tuple[UnderPartitioned, ...] = (),
        ) -> PoolDecision:
            return PoolDecision(
                now,
                action,
                current,
                self._workers,
                proposed,
                reason,
                dict(parallelism or {}),
                under_partitioned,
            )

        paced = self._paced(now)
        if paced is not None:
            return decision(*paced)

        parallelism = decide(
            window.operators, window.edges, window.rates, window.source_rates, s.over_provisioning
        )
        raw = raw_parallelism(window.operators, window.edges, window.rates, window.source_rates)
        has_upstream = {down for _, down in window.edges}
        # Unrounded demand in cores: fractions of different sub-topologies share a worker's core.
        sub_topologies = {
            name: r * (1 + s.over_provisioning) for name, r in raw.items() if name in has_upstream
        }
        demand = workers_for(sub_topologies, window.partitions, s.utilisation_target)
        proposed = min(max(demand.workers, s.min_workers), s.max_workers)
        if proposed == current:
            self._streak.clear()
            return decision(
                "hold",
                f"{demand.cores:g} cores of demand fit {current} workers",
                proposed,
                parallelism,
                demand.under_partitioned,
            )
        if self._streak and (self._streak[-1] > current) != (proposed > current):
            self._streak.clear()
        self._streak.append(proposed)
        needed = s.activation_windows if proposed > current else s.scale_down_windows
        if len(self._streak) < needed:
            return decision(
                "pending",
                f"{proposed} workers proposed for {len(self._streak)} of {needed} evaluations",
                proposed,
                parallelism,
                demand.under_partitioned,
            )
        # The most conservative proposal of the streak is the one that held throughout.
        target = min(self._streak) if proposed > current else max(self._streak)
        self._workers = target
        self._reconfigured_at = now
        self._streak.clear()
        action: Action = "scale_up" if target > current else "scale_down"
        return decision(
            action,
            f"{demand.cores:g} cores of demand held {needed} evaluations: {target} workers",
            proposed,
            parallelism,
            demand.under_partitioned,
        )
