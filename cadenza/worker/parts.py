"""The objects a worker runs with that are code rather than settings.

A setting has a name, a ``CADENZA_*`` variable and an option of ``cadenza worker``
(:mod:`cadenza.worker.config`). A policy object of your own, a state store factory, a clock or a
metrics exporter cannot come from an environment variable, so they are handed to the worker as
:class:`WorkerParts` instead; none of them repeats a setting (a policy or store given by name or
import path is the setting's value, ``policy`` or ``state_store``).
"""

from __future__ import annotations

from dataclasses import dataclass

from cadenza.infra.metrics.prometheus import PrometheusExporter
from cadenza.scheduling.clock import Clock
from cadenza.scheduling.policy import SchedulingPolicy
from cadenza.state.factory import StoreFactory

__all__ = ["WorkerParts"]


@dataclass(frozen=True)
class WorkerParts:
    """``policy``: a policy object (instead of the ``policy`` setting's name or path);
    ``state_store``: a store factory, step name -> :class:`~cadenza.state.StateStore` (instead of
    the ``state_store`` setting); ``clock``: the scheduler's clock (tests inject a virtual one);
    ``exporter``: where the worker's metrics go (one is made if not given)."""

    policy: SchedulingPolicy | None = None
    state_store: StoreFactory | None = None
    clock: Clock | None = None
    exporter: PrometheusExporter | None = None
