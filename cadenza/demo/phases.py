"""What the demo concludes from its phases: per policy, each tenant's results pooled over the phases
that ran at the load asked for.

A phase whose BA capacity was more than ``LOAD_TOLERANCE`` off the calibrated one (``off_load``)
measured the machine's mood, not the policy: it is shown with every other phase, and left out of
its policy's verdict. Pooling (results within target over results expected, summed over the
counted phases) rather than a median keeps every result of every counted phase in the figure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cadenza.demo.s1_config import TENANTS
from cadenza.demo.s1_results import MET_GOAL, met_phrase


@dataclass(frozen=True)
class TenantResult:
    """One tenant's results pooled over the counted phases of one policy."""

    met: int
    expected: int
    results: int
    target_ms: int

    @property
    def ratio(self) -> float | None:
        return self.met / self.expected if self.expected else None

    def verdict(self, goal: float = MET_GOAL) -> str:
        """One plain phrase, worded as :func:`~cadenza.demo.s1_results.met_phrase` words one phase."""
        return met_phrase(self.ratio, self.target_ms, self.expected - self.results, goal, places=1)


@dataclass(frozen=True)
class PolicyResult:
    """A policy's verdict: its tenants pooled over ``counted`` phases; ``off_load`` phases left out."""

    system: str
    counted: tuple[int, ...]
    off_load: tuple[int, ...]
    tenants: Mapping[str, TenantResult] = field(default_factory=dict)

    def met(self, tenant: str, goal: float = MET_GOAL) -> bool | None:
        """Whether ``tenant`` met its target in the counted phases (None: no phase counted)."""
        if not self.counted:
            return None
        ratio = self.tenants[tenant].ratio
        return ratio is not None and ratio >= goal


def policy_result(system: str, phases: Sequence[Mapping[str, Any]]) -> PolicyResult:
    """Pool ``system``'s phases (entries of ``run_benchmark``'s ``runs[system]``) that ran at the load
    asked for; a phase whose load could not be measured (neither a time per BA job from the
    worker nor a burst that queued BA for a second) counts."""
    off = [bool(phase.get("load", {}).get("off_load", False)) for phase in phases]
    counted = [phase for phase, out in zip(phases, off, strict=True) if not out]
    left_out = tuple(int(phase.get("phase", 0)) for phase, out in zip(phases, off, strict=True) if out)
    tenants = {}
    for tenant in TENANTS:
        rows = [phase[tenant] for phase in counted]
        target_ms = int(phases[0][tenant]["target_ms"]) if phases else 0
        tenants[tenant] = TenantResult(
            met=sum(int(row["met"]) for row in rows),
            expected=sum(int(row["results_expected"]) for row in rows),
            results=sum(int(row["results"]) for row in rows),
            target_ms=target_ms,
        )
    return PolicyResult(system, tuple(int(phase.get("phase", 0)) for phase in counted), left_out, tenants)


def in_run_order(runs: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[tuple[str, Mapping[str, Any]]]:
    """Every phase of every system as (system, phase), in the order the phases ran."""
    phases = [(system, phase) for system, entries in runs.items() for phase in entries]
    return sorted(phases, key=lambda item: int(item[1].get("phase", 0)))
