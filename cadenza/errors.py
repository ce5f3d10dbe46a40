"""Exception types shared across cadenza.

Every error cadenza raises on purpose derives from :class:`CadenzaError`, so a caller (the CLI above
all) can tell "cadenza refused, with a message meant for a person" apart from a bug.
"""

from __future__ import annotations


class CadenzaError(Exception):
    """Base of every error cadenza raises deliberately; its message is written for the user."""


class ConfigError(CadenzaError):
    """Settings are missing, malformed or contradict each other; raised at start, never mid-stream."""
