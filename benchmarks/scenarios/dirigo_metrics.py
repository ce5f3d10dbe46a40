"""What S6 reads of the worker's ``/metrics``: the lessees gauge over time, and the lessee counters
between two scrapes, per tenant (``bench_dirigo.py`` runs, this reads)."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Sequence
from typing import Any

from cadenza.demo.worker_metrics import scrape
from cadenza.infra.metrics.scrape import Exposition, counter_deltas, parse

__all__ = ["TENANTS", "LeaseSampler", "lessee_gauge", "lessee_usage", "run_seconds"]

#: S6's tenants, in the order every table and plot shows them.
TENANTS = ("LS", "BA", "IO")


LESSEE_GAUGE = "cadenza_lessees"
#: The worker's lessee counters (sample names), by the key the JSON gives their growth under.
LESSEE_COUNTERS = {
    "leases": "cadenza_lessee_leases_total",
    "releases": "cadenza_lessee_releases_total",
    "lessee_s": "cadenza_lessee_seconds_total",
    "timeouts": "cadenza_lessee_timeouts_total",
    "deaths": "cadenza_lessee_deaths_total",
    "abandoned": "cadenza_lessee_abandoned_total",
    "handoff_s": "cadenza_lessee_handoff_seconds_total",
    "handed_calls": "cadenza_lessee_handed_calls_total",
    "lessor_calls": "cadenza_lessor_calls_total",
}


def _families(text: str) -> set[str]:
    """The metric families ``text`` declares, whether or not they have a series yet (a labelled
    counter nothing has counted has none, yet the worker exports it: its growth is 0, not unknown)."""
    return set(re.findall(r"^# TYPE (\S+)", text, re.MULTILINE))


def lessee_gauge(exposition: Exposition) -> dict[str, float] | None:
    """The ``cadenza_lessees`` gauge per step (``tenant/operator``), or None if the worker exports none."""
    samples = parse(exposition) if isinstance(exposition, str) else exposition
    found = [s for s in samples if s.name == LESSEE_GAUGE]
    if not found:
        return None
    gauge: dict[str, float] = {}
    for sample in found:
        step = (
            sample.labels.get("operator") or sample.labels.get("step") or sample.labels.get("pipeline", "?")
        )
        key = f"{sample.labels.get('tenant', '?')}/{step}"
        gauge[key] = gauge.get(key, 0.0) + float(sample.value)
    return gauge


def lessee_usage(
    before: str, after: str, tenants: Sequence[str] = TENANTS
) -> dict[str, dict[str, float | None]]:
    """Per tenant, how much each lessee counter grew between two scrapes (summed over its steps), and
    the loop's mean hand-off per call in ms; None for a metric the worker does not export (no lessee
    runtime), and for the hand-off of a tenant that handed nothing off."""
    declared = _families(after)
    before_samples, after_samples = parse(before) if before else [], parse(after) if after else []
    usage: dict[str, dict[str, float | None]] = {tenant: {} for tenant in tenants}
    for key, name in LESSEE_COUNTERS.items():
        exported = bool({name, name.removesuffix("_total")} & declared)
        grown = counter_deltas(before_samples, after_samples, name, ("tenant",)) if exported else None
        for tenant in tenants:
            usage[tenant][key] = None if grown is None else round(grown.get((tenant,), 0.0), 3)
    for row in usage.values():
        seconds, calls = row["handoff_s"], row["handed_calls"]
        row["handoff_ms"] = round(seconds / calls * 1000.0, 4) if seconds is not None and calls else None
    return usage


def run_seconds(before: str, after: str) -> dict[str, float]:
    """Per tenant, the seconds the worker spent running its operators between two scrapes."""
    if not after:
        return {}
    grown = counter_deltas(before, after, "cadenza_run_time_seconds_sum", ("tenant",))
    return {tenant: round(seconds, 3) for (tenant,), seconds in grown.items()}


class LeaseSampler:
    """Samples the ``cadenza_lessees`` gauge from the worker's /metrics every ``interval`` seconds, in
    a thread, as (seconds since ``origin``, gauge per step or None)."""

    def __init__(self, port: int, interval: float) -> None:
        self.samples: list[tuple[float, dict[str, float] | None]] = []
        self._port, self._interval = port, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="s6-lease-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            text = scrape(self._port)
            if text:
                self.samples.append((time.time(), lessee_gauge(text)))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def timeline(self, origin: float) -> dict[str, Any]:
        """The samples as the JSON keeps them: times since ``origin`` and one series per step
        (None where a step had no series yet); ``steps`` is empty if the gauge never existed."""
        steps = sorted({step for _, gauge in self.samples if gauge for step in gauge})
        return {
            "t": [round(at - origin, 2) for at, _ in self.samples],
            "steps": {
                step: [None if gauge is None else gauge.get(step) for _, gauge in self.samples]
                for step in steps
            },
        }
