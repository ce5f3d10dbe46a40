"""Errors raised while deriving schemas and while encoding or decoding record values.

Decoding is where data from outside meets the worker, so every failure there is funnelled into one
type, :class:`DecodeError`: the worker catches exactly that type and routes the record to a
dead-letter topic, while any other exception stays a bug (or a transient outage) that must not be
mistaken for bad data.
"""

from __future__ import annotations

from cadenza.errors import CadenzaError

#: Headers a dead-letter record carries; named here so producers and tools agree on them.
ERROR_HEADER = "cadenza-error"
ERROR_TYPE_HEADER = "cadenza-error-type"

# Kafka headers are cheap but not free; a pydantic report on a large record can run to kilobytes.
_MAX_HEADER_MESSAGE = 2000


class SchemaError(CadenzaError):
    """A model cannot be expressed as an Avro schema; raised when a codec is built, never per record."""


class _TypedError(CadenzaError):
    """What encoding and decoding errors share: the name of the exception underneath (``error_type``),
    which the dead-letter headers carry so that failures can be grouped without parsing messages, and
    pickling that keeps it (see :func:`_rebuild`)."""

    def __init__(self, message: str, *, error_type: str) -> None:
        super().__init__(message)
        self.error_type = error_type

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild, (type(self), str(self), self.error_type))


class EncodeError(_TypedError):
    """A value could not be encoded (for instance an int outside Avro's 64-bit ``long``)."""


class DecodeError(_TypedError):
    """Bytes could not be turned into a value: malformed, truncated, wrong schema or failed validation.

    ``error_type`` names the underlying exception class (``ValidationError``, ``EOFError``...), so a
    dead-letter consumer can group failures without parsing the message.
    """

    def as_headers(self) -> list[tuple[str, bytes]]:
        """Headers describing this error, for the record a worker sends to its dead-letter topic."""
        message = str(self)
        if len(message) > _MAX_HEADER_MESSAGE:
            message = message[: _MAX_HEADER_MESSAGE - 3] + "..."
        return [
            (ERROR_HEADER, message.encode("utf-8", "replace")),
            (ERROR_TYPE_HEADER, self.error_type.encode("utf-8", "replace")),
        ]


def _rebuild(cls: type[_TypedError], message: str, error_type: str) -> _TypedError:
    # Keyword-only constructors break the default exception pickling, which replays ``args``.
    return cls(message, error_type=error_type)
