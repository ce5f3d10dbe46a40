"""Resolve a policy name from configuration into a policy object.

Policies are named in settings and on the command line, so every way this can go wrong (a typo, a
module that does not import, a class that is not a policy, options it does not take) becomes a
:class:`ConfigError` at start-up with a message that says what to fix, never a traceback mid-stream.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

from cadenza.errors import ConfigError
from cadenza.import_path import resolve_import_path
from cadenza.scheduling.costs import CostModel
from cadenza.scheduling.policies import CameoPolicy, EdfPolicy, FairPolicy, FifoPolicy, SjfPolicy
from cadenza.scheduling.policy import HOOKS, SchedulingPolicy

__all__ = [
    "BUILTIN_POLICIES",
    "check_policy",
    "check_policy_class",
    "get_policy",
    "load_policy_class",
    "resolve_policy",
]

BUILTIN_POLICIES: dict[str, type[SchedulingPolicy]] = {
    "fifo": FifoPolicy,
    "edf": EdfPolicy,
    "cameo": CameoPolicy,
    "sjf": SjfPolicy,
    "fair": FairPolicy,
}

_T = TypeVar("_T")

_HINT = f"use one of {', '.join(BUILTIN_POLICIES)}, or 'package.module:ClassName' for a policy of your own"


def load_policy_class(name_or_import_path: str) -> type[SchedulingPolicy]:
    """The class behind a built-in name or a ``package.module:ClassName`` import path."""
    if not isinstance(name_or_import_path, str) or not name_or_import_path.strip():
        raise ConfigError(f"scheduling policy must be a non-empty name, got {name_or_import_path!r}; {_HINT}")
    spec = name_or_import_path.strip()
    builtin = BUILTIN_POLICIES.get(spec.lower())
    if builtin is not None:
        return builtin
    if ":" not in spec:
        raise ConfigError(f"unknown scheduling policy {spec!r}; {_HINT}")
    target = resolve_import_path(spec, "scheduling policy", "package.module:ClassName")
    if not inspect.isclass(target):
        raise ConfigError(f"scheduling policy {spec!r} is a {type(target).__name__}, not a class")
    return check_policy_class(target, spec)


_FLAGS: tuple[str, ...] = ("time_dependent", "monotone_priority", "shares_source_contexts", "keeps_hook_info")
"""The yes/no declarations of :class:`SchedulingPolicy` the scheduler and the worker read as they are."""


def check_policy_class(cls: type, spec: str) -> type[SchedulingPolicy]:
    """``cls`` if it honours the :class:`SchedulingPolicy` contract, else a :class:`ConfigError`
    saying what is wrong.

    The worker reads the contract's declarations directly on the hot path, so a class that merely
    has the hooks is refused: subclassing the base is what gives it every declaration with its
    default. Declarations a class computes (properties) are checked on the object, by
    :func:`check_policy`.
    """
    missing = [hook for hook in HOOKS if not callable(getattr(cls, hook, None))]
    if not issubclass(cls, SchedulingPolicy):
        raise ConfigError(
            f"scheduling policy {spec!r} does not subclass cadenza.scheduling.SchedulingPolicy, whose "
            f"defaults declare what the worker relies on; subclass it and implement {', '.join(HOOKS)}"
            + (f" (missing: {', '.join(missing)})" if missing else "")
        )
    abstract = sorted(getattr(cls, "__abstractmethods__", ()))
    if missing or abstract:
        raise ConfigError(
            f"scheduling policy {spec!r} does not implement the SchedulingPolicy interface; "
            f"missing or abstract: {', '.join(missing or abstract)} "
            f"(subclass cadenza.scheduling.SchedulingPolicy and implement {', '.join(HOOKS)})"
        )
    wrong = [
        f"{flag} = {value!r}"
        for flag in _FLAGS
        if not isinstance(value := inspect.getattr_static(cls, flag), bool | property)
    ]
    name = inspect.getattr_static(cls, "name")
    if not isinstance(name, str):
        wrong.append(f"name = {name!r}")
    if wrong:
        raise ConfigError(
            f"scheduling policy {spec!r} declares {', '.join(wrong)}; the name must be a string and "
            f"{', '.join(_FLAGS)} True or False"
        )
    if (
        cls.postpones_tardy is not SchedulingPolicy.postpones_tardy
        and cls.deadline_parts is SchedulingPolicy.deadline_parts
    ):
        raise ConfigError(
            f"scheduling policy {spec!r} declares postpones_tardy but does not implement deadline_parts, "
            "which the scheduler then calls instead of priority"
        )
    return cls


def check_policy(policy: object, spec: str) -> SchedulingPolicy:
    """``policy`` if it and its class honour the :class:`SchedulingPolicy` contract, else a
    :class:`ConfigError` (the declarations it computes, such as ``postpones_tardy``, included)."""
    check_policy_class(type(policy), spec)
    policy = cast(SchedulingPolicy, policy)  # a subclass: checked just above
    wrong = [
        f"{flag} is {value!r}"
        for flag in (*_FLAGS, "postpones_tardy")
        if not isinstance(value := getattr(policy, flag), bool)
    ]
    model: object = policy.cost_model  # typed on the base, but a subclass may assign anything
    if model is not None and not isinstance(model, CostModel):
        wrong.append(f"cost_model is a {type(model).__name__}, not a CostModel or None")
    if wrong:
        raise ConfigError(
            f"scheduling policy {spec!r}: {', '.join(wrong)} (see cadenza.scheduling.SchedulingPolicy)"
        )
    return policy


def get_policy(name_or_import_path: str, **options: Any) -> SchedulingPolicy:
    """Create the policy named by ``name_or_import_path`` with ``options`` as constructor arguments."""
    cls = load_policy_class(name_or_import_path)
    policy = _user_call(
        name_or_import_path, f"cannot be created with options {sorted(options)}", lambda: cls(**options)
    )
    return check_policy(policy, name_or_import_path)


def resolve_policy(policy: str | SchedulingPolicy, tenant_weights: Mapping[str, float]) -> SchedulingPolicy:
    """The policy a worker runs: ``policy`` itself once checked, or the one it names, given the
    tenants' weights (:meth:`SchedulingPolicy.set_tenant_weights`).

    A policy object is used as its creator configured it: weights are only handed to one the
    worker creates.
    """
    if not isinstance(policy, str):
        return check_policy(policy, repr(policy))
    made = get_policy(policy)
    _user_call(
        policy,
        f"refused the tenant weights {dict(tenant_weights)!r}",
        lambda: made.set_tenant_weights(tenant_weights),
    )
    return made


def _user_call(spec: str, failure: str, call: Callable[[], _T]) -> _T:
    """``call()``, a policy's own code: whatever it raises is still a setup error, said as ``failure``."""
    try:
        return call()
    except ConfigError:
        raise
    except Exception as exc:
        raise ConfigError(f"scheduling policy {spec!r} {failure}: {type(exc).__name__}: {exc}") from exc
