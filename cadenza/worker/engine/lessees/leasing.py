"""When a step leases a lessee and when it gives one back: the scheduler's slack, with hysteresis.

Pure and clock-free: every method takes ``now``, so the rules are tested exactly. The slack of a
step's queued records is ``start deadline of the most urgent - now - cost of the work ahead``, the
work ahead being the queued calls spread over the lessees (at least one: the lessor itself). A
negative slack means the step's records will miss their targets at the current parallelism, which
is the one signal that leases (Dirigo's data-plane hook; here the deadline the scheduler orders by).

Hysteresis keeps the lessee count from flapping: a step leases at most one lessee per
``lease_gap`` (a new lessee must get its first batch before the slack can show its effect), and
releases one only after it has idled for ``idle_release`` (a burst's gaps do not give lessees back
only to lease them again a moment later), one per ``idle_release`` again.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["LeaseRules", "Leasing", "slack"]


@dataclass(frozen=True, slots=True)
class LeaseRules:
    """``floor``: lessees always kept (``parallel=N``: N; ``"auto"``: 0); ``cap``: at most this many."""

    floor: int
    cap: int
    idle_release: float = 2.0
    lease_gap: float = 0.05


def slack(head_start_deadline: float, now: float, cost: float, queued: int, lessees: int) -> float:
    """Seconds the most urgent queued record can still wait, once the work ahead of it is done."""
    return head_start_deadline - now - cost * queued / max(lessees, 1)


class Leasing:
    """One step's lease decisions; counts what it decided, for the metrics and the flap check."""

    __slots__ = ("last_lease", "last_release", "leases", "releases", "rules")

    def __init__(self, rules: LeaseRules) -> None:
        if rules.floor < 0 or rules.cap < rules.floor:
            raise ValueError(f"lessee floor {rules.floor} and cap {rules.cap} do not make a range")
        self.rules = rules
        self.last_lease = -math.inf
        self.last_release = -math.inf
        self.leases = 0
        self.releases = 0

    def should_lease(self, now: float, lessees: int, *, slack: float, needs_one: bool, free: bool) -> bool:
        """Whether to lease one more lessee now.

        ``needs_one``: the step has work and cannot run it on the lessor (a thread step, a step with a
        timeout), so its first lessee does not wait for the slack. ``free``: the worker's budget has
        room (a core for a process lessee, a thread slot for a thread).
        """
        rules = self.rules
        if lessees >= rules.cap or not free:
            return False
        if lessees < rules.floor or (needs_one and lessees == 0):
            return True
        return slack < 0.0 and now - self.last_lease >= rules.lease_gap

    def leased(self, now: float) -> None:
        self.leases += 1
        self.last_lease = now

    def should_release(self, now: float, lessees: int, idle_since: float) -> bool:
        """Whether an idle lessee (idle since ``idle_since``) goes back now."""
        rules = self.rules
        if lessees <= rules.floor:
            return False
        waited = now - max(idle_since, self.last_lease, self.last_release)
        return waited >= rules.idle_release

    def released(self, now: float) -> None:
        self.releases += 1
        self.last_release = now
