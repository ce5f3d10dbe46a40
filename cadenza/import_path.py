"""Objects named by ``package.module:attribute`` in settings: a user's policy class, store factory.

Such a name comes from a setting or the command line, so every way it can fail (no colon, a module
that is missing or raises while importing, an attribute that is not there) is a
:class:`~cadenza.errors.ConfigError` at start-up that names what the setting was for and what to fix.
"""

from __future__ import annotations

import importlib

from cadenza.errors import ConfigError

__all__ = ["resolve_import_path"]


def resolve_import_path(spec: str, what: str, form: str) -> object:
    """The object ``spec`` (``package.module:attr.path``) names; ``what`` is what it is meant to be
    (``"state store"``) and ``form`` the shape to suggest (``"package.module:factory"``)."""
    module_name, _, attr_path = spec.partition(":")
    if not module_name or not attr_path:
        raise ConfigError(f"{what} {spec!r} is not of the form {form!r}")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # anything a user module raises while importing is a configuration problem
        cause = (
            f"module {exc.name or module_name!r} not found"
            if isinstance(exc, ModuleNotFoundError)
            else str(exc)
        )
        raise ConfigError(
            f"{what} {spec!r}: cannot import module {module_name!r}: {type(exc).__name__}: {cause}"
        ) from exc
    target: object = module
    for part in attr_path.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise ConfigError(
                f"{what} {spec!r}: module {module_name!r} has no attribute {attr_path!r}"
            ) from None
    return target
