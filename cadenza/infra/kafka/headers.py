"""Small helpers over confluent-kafka's header representation.

confluent-kafka hands headers back as ``list[tuple[str, bytes | None]]`` (or ``None`` when a record
has none). Lookups are linear on purpose: records carry a handful of headers, and a list scan beats
building a dict per record on the hot path.
"""

from __future__ import annotations

from collections.abc import Sequence

Header = tuple[str, bytes | None]
Headers = list[Header]
#: What confluent-kafka's stubs say ``Message.headers()`` may return (consumed records give a list).
AnyHeaders = Sequence[tuple[str, str | bytes | None]] | dict[str, str | bytes | None] | None


def get_header(headers: AnyHeaders, key: str) -> bytes | None:
    """The value of the last header named ``key`` (Kafka allows repeats; the latest wins), or None."""
    if not headers:
        return None
    if isinstance(headers, dict):
        headers = list(headers.items())
    found: str | bytes | None = None
    for name, value in headers:
        if name == key:
            found = value
    return found.encode() if isinstance(found, str) else found


def set_header(headers: Sequence[Header] | None, key: str, value: bytes) -> Headers:
    """A new header list with ``key`` set to ``value``, replacing any earlier values of ``key``."""
    result: Headers = [(name, old) for name, old in headers or () if name != key]
    result.append((key, value))
    return result


def headers_as_dict(headers: Sequence[Header] | None) -> dict[str, bytes | None]:
    """Headers as a dict for inspection and tests (repeats collapse to the last value)."""
    return dict(headers or ())
