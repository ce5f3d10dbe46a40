"""Names that end up in Kafka: pipeline names (which prefix internal topics), topics and tenants.

Kafka accepts topic names of at most 249 characters from ``[A-Za-z0-9._-]``. Checking these when a
pipeline is declared, not when a worker first creates its topics, turns a broker error at deploy time
into a message at the user's own line.
"""

from __future__ import annotations

import re

MAX_TOPIC_LENGTH = 249
MAX_PIPELINE_NAME_LENGTH = 200
"""Leaves room for the suffixes of internal topics (``.12-window_aggregate.changelog``)."""

_SAFE = re.compile(r"^[A-Za-z0-9._-]+$")


def name_problem(value: object, *, what: str, max_length: int = MAX_TOPIC_LENGTH) -> str | None:
    """Why ``value`` cannot be used as ``what`` in a Kafka topic name, or ``None`` if it can."""
    if not isinstance(value, str):
        return f"{what} must be a string, got {value!r}"
    if not value:
        return f"{what} must not be empty"
    if len(value) > max_length:
        return f"{what} {value!r} is {len(value)} characters long; the limit is {max_length}"
    if value in {".", ".."}:
        return f"{what} must not be '.' or '..'"
    if not _SAFE.match(value):
        return f"{what} {value!r} may only contain letters, digits, '.', '_' and '-' (Kafka topic rules)"
    return None
