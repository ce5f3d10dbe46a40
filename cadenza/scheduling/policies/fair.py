"""Weighted proportional share of executor time across tenants.

Accounting is start-time fair queueing over measured run time. Each tenant has a normalized service
``s`` (seconds of executor time it received, divided by its weight); the scheduler runs the head
whose tenant has the least. In token terms: the system hands out tokens in proportion to weight as
it serves (the virtual time ``V``, where the account of the most recently served tenant stood when
its run began, never decreases, and every tenant's allowance grows with it), a run costs its run
time, and the tenant holding the most tokens relative to its weight, ``V - s``, goes first. A tenant
returning from idle is lifted to ``V - burst``: it may bank at most ``burst * weight`` seconds, so
idling never buys a monopoly.

Why this bounds a low-weight tenant's wait under a flood: after each of its runs the flooding
tenant's ``s`` is above ``V`` (it was the least, and then paid), while a tenant that was idle, or has
had less than its share, counts at most ``V`` (an idle one exactly ``V - burst``). So the newcomer's
head runs right after the quantum in progress, whatever the weights. The burst only decides how far
it may then run ahead (up to ``burst * weight`` seconds) before the two share the executor by weight.

The scheduler only evaluates head records, so all accounting happens in ``process_ctx_from_reply``,
which the executor calls after every run. No clock is read: virtual time advances with measured
service, which makes the policy deterministic for a given sequence of replies.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from cadenza.errors import ConfigError
from cadenza.scheduling.context import SchedulingContext
from cadenza.scheduling.costs import CostModel
from cadenza.scheduling.policy import BasePolicy, Reply

__all__ = ["FairPolicy"]


def _check_weight(tenant: str, weight: float) -> float:
    if isinstance(weight, bool) or not isinstance(weight, int | float) or not (0.0 < weight < math.inf):
        raise ConfigError(
            f"fair policy: weight of tenant {tenant!r} must be a positive finite number, got {weight!r}"
        )
    return float(weight)


class FairPolicy(BasePolicy):
    """Serve tenants in proportion to their weights (see the module docstring for the accounting)."""

    name = "fair"
    # A waiting head's priority changes as tenants are served, so it is re-evaluated at each pick; it
    # only ever grows (service and virtual time never decrease), which lets the scheduler re-key its
    # heap lazily instead of scanning all heads.
    time_dependent = True
    monotone_priority = True

    def __init__(
        self,
        weights: Mapping[str, float] | None = None,
        default_weight: float = 1.0,
        burst: float = 0.0,
        cost_model: CostModel | None = None,
    ) -> None:
        super().__init__(cost_model)
        self._default_weight = _check_weight("<default>", default_weight)
        if not (0.0 <= burst < math.inf):
            raise ConfigError(
                f"fair policy: burst must be a finite, non-negative number of seconds, got {burst!r}"
            )
        self._burst = float(burst)
        self._weights = {tenant: _check_weight(tenant, w) for tenant, w in (weights or {}).items()}
        self._service: dict[str, float] = {}
        self._vtime = 0.0

    def weight(self, tenant_id: str) -> float:
        return self._weights.get(tenant_id, self._default_weight)

    def set_weight(self, tenant_id: str, weight: float) -> None:
        """Change a tenant's share from now on; service already received is kept as normalized."""
        self._weights[tenant_id] = _check_weight(tenant_id, weight)

    def set_tenant_weights(self, weights: Mapping[str, float]) -> None:
        for tenant, weight in weights.items():
            self.set_weight(tenant, weight)

    @property
    def virtual_time(self) -> float:
        return self._vtime

    def normalized_service(self, tenant_id: str) -> float:
        """The tenant's service over weight as the scheduler sees it (lifted to ``V - burst``)."""
        floor = self._vtime - self._burst
        service = self._service.get(tenant_id, floor)
        return service if service > floor else floor

    def credit(self, tenant_id: str) -> float:
        """Tokens, in seconds of executor time, the tenant may use before it falls behind its share."""
        return (self._vtime - self.normalized_service(tenant_id)) * self.weight(tenant_id)

    def _stamp(self, ctx: SchedulingContext) -> float:
        return self.normalized_service(ctx.tenant_id)

    def priority(self, ctx: SchedulingContext, now: float) -> tuple[float, float]:
        floor = self._vtime - self._burst
        service = self._service.get(ctx.tenant_id, floor)
        return (service if service > floor else floor, ctx.frontier_time)

    def process_ctx_from_reply(self, reply: Reply) -> None:
        super().process_ctx_from_reply(reply)
        run_time = reply.run_time
        if not (0.0 <= run_time < math.inf):
            return
        tenant = reply.tenant_id
        start = self.normalized_service(tenant)
        self._vtime = max(self._vtime, start)
        self._service[tenant] = start + run_time / self._weights.get(tenant, self._default_weight)

    def __repr__(self) -> str:
        return (
            f"FairPolicy(weights={self._weights!r}, default_weight={self._default_weight!r}, "
            f"burst={self._burst!r})"
        )
