"""Resolve a policy name from configuration into a policy object.

Policies are named in settings and on the command line, so every way this can go wrong (a typo, a
module that does not import, a class that is not a policy, options it does not take) becomes a
:class:`ConfigError` at start-up with a message that says what to fix, never a traceback mid-stream.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any, cast

from cadenza.errors import ConfigError
from cadenza.scheduling.policies import CameoPolicy, EdfPolicy, FairPolicy, FifoPolicy, SjfPolicy
from cadenza.scheduling.policy import HOOKS, SchedulingPolicy

__all__ = ["BUILTIN_POLICIES", "get_policy", "load_policy_class"]

BUILTIN_POLICIES: dict[str, type[SchedulingPolicy]] = {
    "fifo": FifoPolicy,
    "edf": EdfPolicy,
    "cameo": CameoPolicy,
    "sjf": SjfPolicy,
    "fair": FairPolicy,
}

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
    module_name, _, attr_path = spec.partition(":")
    if not module_name or not attr_path:
        raise ConfigError(f"scheduling policy {spec!r} is not of the form 'package.module:ClassName'")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # anything a user module raises while importing is a configuration problem
        raise ConfigError(
            f"scheduling policy {spec!r}: cannot import module {module_name!r}: {type(exc).__name__}: {exc}"
        ) from exc
    target: object = module
    for part in attr_path.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise ConfigError(
                f"scheduling policy {spec!r}: module {module_name!r} has no attribute {attr_path!r}"
            ) from None
    if not inspect.isclass(target):
        raise ConfigError(f"scheduling policy {spec!r} is a {type(target).__name__}, not a class")
    missing = [hook for hook in HOOKS if not callable(getattr(target, hook, None))]
    abstract = sorted(getattr(target, "__abstractmethods__", ()))
    if missing or abstract:
        raise ConfigError(
            f"scheduling policy {spec!r} does not implement the SchedulingPolicy interface; "
            f"missing or abstract: {', '.join(missing or abstract)} "
            f"(subclass cadenza.scheduling.SchedulingPolicy and implement {', '.join(HOOKS)})"
        )
    # A class with every hook but no SchedulingPolicy base is accepted: the interface is structural.
    return cast(type[SchedulingPolicy], target)


def get_policy(name_or_import_path: str, **options: Any) -> SchedulingPolicy:
    """Create the policy named by ``name_or_import_path`` with ``options`` as constructor arguments."""
    cls = load_policy_class(name_or_import_path)
    try:
        return cls(**options)
    except ConfigError:
        raise
    except Exception as exc:  # a user constructor may raise anything; it is still a setup error
        raise ConfigError(
            f"scheduling policy {name_or_import_path!r} cannot be created with options "
            f"{sorted(options)}: {type(exc).__name__}: {exc}"
        ) from exc
